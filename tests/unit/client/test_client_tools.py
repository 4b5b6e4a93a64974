"""toolq.client_tools: the caller's functions as client tools, and their answers to a paused job."""

from __future__ import annotations

import asyncio

from toolq.client_tools import ClientTools
from toolq.wire.limits import MAX_TOOL_RESULT_BYTES
from toolq.wire.protocol import PendingAction


def call(name: str, **arguments) -> PendingAction:
    return PendingAction(id=f"call_{name}", name=name, arguments=arguments, kind="client", where="client")


def lookup_user(user: str) -> str:
    """Look a user up.

    Args:
        user: the login
    """
    return f"{user} is an admin"


async def slow_double(n: int) -> int:
    await asyncio.sleep(0)
    return 2 * n


def broken(x: int) -> str:
    raise RuntimeError("directory down")


def huge() -> str:
    return "x" * (MAX_TOOL_RESULT_BYTES + 1)


def test_definitions_come_from_the_functions():
    [d] = ClientTools({"find": lookup_user}).definitions()
    assert d.execution == "client" and d.name == "find"
    assert d.function.description == "Look a user up."
    assert d.function.parameters["properties"]["user"]["description"] == "the login"
    assert d.function.parameters["required"] == ["user"]


async def test_results_of_sync_async_failing_and_missing_functions():
    tools = ClientTools([lookup_user, slow_double, broken, huge])
    ok = await tools.result(call("lookup_user", user="ann"))
    assert (ok.tool_call_id, ok.content, ok.is_error) == ("call_lookup_user", "ann is an admin", False)
    assert (await tools.result(call("slow_double", n=21))).content == "42"
    failed = await tools.result(call("broken", x=1))
    assert failed.is_error and "directory down" in failed.content
    invalid = await tools.result(call("slow_double", n="21"))  # checked as a worker's tool is
    assert invalid.is_error and "n" in invalid.content
    too_big = await tools.result(call("huge"))
    assert too_big.is_error and "above the limit" in too_big.content
    missing = await tools.result(call("nothing"))
    assert missing.is_error and "no function for tool 'nothing'" in missing.content


async def test_decisions():
    gated = PendingAction(id="c", name="rm", arguments={}, kind="approval", where="worker")
    assert (await ClientTools().decision(gated)).approved is False  # no approver: denied
    d = await ClientTools(approve=lambda c: (False, f"not {c.name}")).decision(gated)
    assert (d.approved, d.reason) == (False, "not rm")

    async def yes(c):
        return True

    d = await ClientTools(approve=yes).decision(gated)
    assert (d.tool_call_id, d.approved, d.reason) == ("c", True, None)
