"""The tool registry: schemas from signatures, validation messages, execution and timeouts.

Every test builds its own ToolRegistry so nothing collides with the module-level REGISTRY.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
import threading
import time
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from toolq.tools import (
    REGISTRY,
    ToolLoadError,
    ToolOutcome,
    ToolRegistrationError,
    ToolRegistry,
    UnknownToolError,
    load_tool_modules,
)
from worker import demo_tools


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(BaseModel):
    x: float
    y: float = 0.0
    title: str = "p"  # a field named like a schema keyword must survive title-stripping


class Node(BaseModel):
    children: list[Node] = []


def params(reg: ToolRegistry, name: str) -> dict:
    return reg.specs([name])[0]["function"]["parameters"]


def keys_anywhere(node) -> set[str]:
    """All dict keys in a schema, except the names under "properties" (those are field names)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key == "properties":
                for sub in value.values():
                    found |= keys_anywhere(sub)
            else:
                found |= keys_anywhere(value)
    elif isinstance(node, list):
        for item in node:
            found |= keys_anywhere(item)
    return found


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry()


# --------------------------------------------------------------------------------- schemas


def test_spec_shape_and_basic_types(reg):
    @reg.tool
    def basic(n: int, x: float, s: str, flag: bool = False) -> str:
        """Do basic things."""
        return ""

    spec = reg.specs()[0]
    assert spec == {
        "type": "function",
        "function": {
            "name": "basic",
            "description": "Do basic things.",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "s": {"type": "string"},
                    "flag": {"type": "boolean", "default": False},
                },
                "required": ["n", "x", "s"],
            },
        },
    }


def test_literal_enum_optional_list_schema(reg):
    @reg.tool
    def kinds(
        mode: Literal["add", "sub"] = "add",
        color: Color = Color.GREEN,
        note: str | None = None,
        nums: list[int] = [],  # noqa: B006 - pydantic copies defaults per call
    ) -> None:
        """Kinds."""

    p = params(reg, "kinds")
    assert p["properties"]["mode"] == {"type": "string", "enum": ["add", "sub"], "default": "add"}
    assert p["properties"]["color"]["enum"] == ["red", "green"]
    assert p["properties"]["color"]["default"] == "green"
    # Optional with a None default is shown as the plain type, simply not required.
    assert p["properties"]["note"] == {"type": "string"}
    assert p["properties"]["nums"] == {"type": "array", "items": {"type": "integer"}, "default": []}
    assert p["required"] == []


def test_nested_model_is_inlined_without_titles_or_refs(reg):
    @reg.tool
    def place(point: Point, color: Color) -> None:
        """Place."""

    p = params(reg, "place")
    point = p["properties"]["point"]
    assert point["type"] == "object"
    assert set(point["properties"]) == {"x", "y", "title"}
    assert point["required"] == ["x"]
    assert p["properties"]["color"]["enum"] == ["red", "green"]
    assert not {"title", "$ref", "$defs", "anyOf"} & keys_anywhere(p)
    json.dumps(p)  # self-contained and plain JSON


def test_docstring_summary_and_google_args(reg):
    @reg.tool
    def weather(city: str, days: int = 1, units: Annotated[str, Field(description="From Field")] = "c") -> str:
        """Get the weather
        for a city.

        More detail that is not part of the summary.

        Args:
            city: The city name,
                e.g. Paris.
            days (int): How many days.
            units: From the docstring (the Field description wins).

        Returns:
            A forecast.
        """
        return ""

    spec = reg.specs()[0]["function"]
    assert spec["description"] == "Get the weather for a city."
    props = spec["parameters"]["properties"]
    assert props["city"]["description"] == "The city name, e.g. Paris."
    assert props["days"]["description"] == "How many days."
    assert props["units"]["description"] == "From Field"


def test_explicit_name_description_timeout_and_decorator_returns_function(reg):
    async def impl(a: int) -> int:
        """Ignored docstring."""
        return a

    returned = reg.tool(name="renamed", description="Custom.", timeout_s=2.5)(impl)
    assert returned is impl
    t = reg.get("renamed")
    assert (t.name, t.description, t.timeout_s, t.is_async) == ("renamed", "Custom.", 2.5, True)
    assert reg.names() == ["renamed"]


def test_parameter_names_that_clash_with_pydantic_work(reg):
    @reg.tool
    def odd(json: str, schema: int, model_config: bool = True) -> dict:
        """Odd names."""
        return {"json": json, "schema": schema, "model_config": model_config}

    assert list(params(reg, "odd")["properties"]) == ["json", "schema", "model_config"]
    assert reg.validate("odd", {"json": "a", "schema": 1}) == []


def test_registration_errors(reg):
    def star(*args: int) -> None: ...
    def kw(a: int, **kwargs: int) -> None: ...
    def untyped(a) -> None: ...
    def recursive(node: Node) -> None: ...

    with pytest.raises(ToolRegistrationError, match=r"\*args is not allowed"):
        reg.tool(star)
    with pytest.raises(ToolRegistrationError, match=r"\*\*kwargs is not allowed"):
        reg.tool(kw)
    with pytest.raises(ToolRegistrationError, match="'a' has no type hint"):
        reg.tool(untyped)
    with pytest.raises(ToolRegistrationError, match="recursive type"):
        reg.tool(recursive)
    with pytest.raises(ToolRegistrationError, match="invalid"):
        reg.tool(name="has space")(lambda: None)
    assert reg.names() == []


def test_duplicate_name_is_an_error(reg):
    @reg.tool
    def dup(a: int) -> int:
        return a

    def other(b: str) -> str:
        return b

    with pytest.raises(ToolRegistrationError, match="'dup' is already registered"):
        reg.tool(name="dup")(other)
    assert reg.get("dup").fn is dup


def test_specs_order_subset_and_unknown_names(reg):
    for n in ("one", "two", "three"):
        reg.tool(name=n)(lambda: None)
    assert [s["function"]["name"] for s in reg.specs()] == ["one", "two", "three"]
    assert [s["function"]["name"] for s in reg.specs(["three", "one"])] == ["three", "one"]
    with pytest.raises(UnknownToolError) as info:
        reg.specs(["one", "nope", "zip"])
    assert isinstance(info.value, KeyError)
    assert info.value.names == ["nope", "zip"]
    assert "'nope', 'zip'" in str(info.value)

    job = reg.subset(["two"])
    assert job.names() == ["two"]
    assert reg.names() == ["one", "two", "three"]  # the original is untouched
    assert job.validate("one", {}) == ["unknown tool 'one'; available tools: two"]
    with pytest.raises(KeyError):
        reg.subset(["missing"])


def test_spec_mutation_does_not_leak(reg):
    @reg.tool
    def t(a: int) -> int:
        return a

    reg.specs()[0]["function"]["parameters"]["properties"]["a"]["type"] = "string"
    assert params(reg, "t")["properties"]["a"]["type"] == "integer"


# ------------------------------------------------------------------------------ validation


@pytest.fixture
def zreg() -> ToolRegistry:
    r = ToolRegistry()
    r.tool(demo_tools.calculate_zorbix)
    return r


def test_valid_arguments(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": 15, "bix": 7}) == []
    assert zreg.validate("calculate_zorbix", {"zorb": 1, "bix": 2, "mode": "mul"}) == []


def test_unknown_tool(zreg):
    assert zreg.validate("nope", {}) == ["unknown tool 'nope'; available tools: calculate_zorbix"]


def test_missing_required(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": 1}) == ["missing required argument 'bix' (an integer)"]


def test_string_for_integer(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": "15", "bix": 7}) == [
        "argument 'zorb' must be an integer, got the string \"15\""
    ]


def test_bool_and_float_are_not_integers(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": True, "bix": 7.5}) == [
        "argument 'zorb' must be an integer, got the boolean true",
        "argument 'bix' must be an integer, got the number 7.5",
    ]


def test_value_outside_literal(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": 1, "bix": 2, "mode": "pow"}) == [
        'argument \'mode\' must be one of "add","sub","mul","div", got the string "pow"'
    ]


def test_unknown_argument_lists_the_signature(zreg):
    assert zreg.validate("calculate_zorbix", {"zorb": 1, "bix": 2, "x": 3}) == [
        "unknown argument 'x'; calculate_zorbix takes: zorb (integer, required), "
        'bix (integer, required), mode (one of "add","sub","mul","div", default "add")'
    ]


def test_arguments_must_be_an_object(zreg):
    assert zreg.validate("calculate_zorbix", [1, 2]) == [
        "arguments for 'calculate_zorbix' must be a JSON object, got an array"
    ]


def test_number_accepts_integer_but_not_bool_or_string(reg):
    @reg.tool
    def scale(factor: float, color: Color = Color.RED) -> float:
        return factor

    assert reg.validate("scale", {"factor": 2}) == []
    assert reg.validate("scale", {"factor": 2.5, "color": "green"}) == []
    assert reg.validate("scale", {"factor": False}) == ["argument 'factor' must be a number, got the boolean false"]
    assert reg.validate("scale", {"factor": "2"}) == ["argument 'factor' must be a number, got the string \"2\""]
    assert reg.validate("scale", {"factor": 1, "color": "blue"}) == [
        'argument \'color\' must be one of "red","green", got the string "blue"'
    ]


def test_nested_paths_union_and_constraints(reg):
    @reg.tool
    def shapes(
        nums: list[int],
        point: Point | None = None,
        key: int | str = 0,
        count: Annotated[int, Field(ge=0)] = 0,
        note: str | None = None,
    ) -> None: ...

    assert reg.validate("shapes", {"nums": [1, "2"], "point": {"y": 1}}) == [
        "argument 'nums[1]' must be an integer, got the string \"2\"",
        "missing required argument 'point.x' (a number)",
    ]
    assert reg.validate("shapes", {"nums": [], "key": True}) == [
        "argument 'key' must be an integer or a string, got the boolean true"
    ]
    assert reg.validate("shapes", {"nums": [], "count": -1}) == [
        "argument 'count' should be greater than or equal to 0, got the number -1"
    ]
    assert reg.validate("shapes", {"nums": "1,2"}) == [
        "argument 'nums' must be an array of integers, got the string \"1,2\""
    ]
    # An explicit null for an optional argument is fine, although the schema does not show null.
    assert reg.validate("shapes", {"nums": [], "note": None, "point": None}) == []


# ------------------------------------------------------------------------------- execution


async def test_sync_tool_gets_coerced_values_and_json_result(reg):
    seen = {}

    @reg.tool
    def echo(point: Point, color: Color, factor: float, label: str = "é") -> dict:
        seen.update(point=point, color=color, factor=factor)
        return {"x": point.x, "color": color, "label": label}

    out = await reg.execute("echo", {"point": {"x": 1}, "color": "green", "factor": 2})
    assert out.ok and out.error is None
    assert out.content == '{"x":1.0,"color":"green","label":"é"}'  # compact, not ascii-escaped
    assert isinstance(seen["point"], Point) and seen["color"] is Color.GREEN
    assert isinstance(seen["factor"], float)
    assert out.duration_ms >= 0


async def test_async_tool_and_str_result_as_is(reg):
    @reg.tool
    async def greet(name: str) -> str:
        await asyncio.sleep(0)
        return f"hello {name}"

    assert await reg.execute("greet", {"name": "Ann"}) == ToolOutcome(
        ok=True, content="hello Ann", error=None, duration_ms=pytest.approx(0, abs=1000)
    )


async def test_invalid_arguments_do_not_run_the_tool(zreg):
    out = await zreg.execute("calculate_zorbix", {"zorb": "15", "bix": 7})
    assert not out.ok
    assert out.error == out.content == "argument 'zorb' must be an integer, got the string \"15\""
    assert not (await zreg.execute("nope", {})).ok


async def test_raising_tool_gives_failed_outcome(reg):
    @reg.tool
    def boom(a: int) -> int:
        raise ValueError(f"bad {a}")

    @reg.tool
    async def aboom() -> None:
        raise TimeoutError("upstream slow")  # the tool's own timeout, not ours

    out = await reg.execute("boom", {"a": 1})
    assert (out.ok, out.error) == (False, "tool 'boom' failed: ValueError: bad 1")
    out = await reg.execute("aboom", {})
    assert out.error == "tool 'aboom' failed: TimeoutError: upstream slow"


async def test_unserializable_result_is_an_error(reg):
    @reg.tool
    def loop_() -> list:
        x: list = []
        x.append(x)
        return x

    out = await reg.execute("loop_", {})
    assert not out.ok and "not JSON" in out.error


async def test_hung_sync_tool_times_out_quickly(reg):
    @reg.tool
    def hang() -> None:
        time.sleep(5)

    start = time.monotonic()
    out = await reg.execute("hang", {}, timeout_s=0.2)
    elapsed = time.monotonic() - start
    assert (out.ok, out.error) == (False, "tool 'hang' timed out after 0.2 s")
    assert 0.15 < elapsed < 1.0
    # The abandoned thread does not hold asyncio's default executor.
    assert await asyncio.wait_for(asyncio.to_thread(lambda: 1), 1) == 1


async def test_hung_async_tool_times_out_even_if_it_ignores_cancel(reg):
    @reg.tool
    async def ahang() -> None:
        await asyncio.sleep(5)

    @reg.tool
    async def stubborn() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            await asyncio.sleep(1)  # swallows the cancel and carries on a while

    for name, limit in (("ahang", 1.0), ("stubborn", 0.8)):
        start = time.monotonic()
        out = await reg.execute(name, {}, timeout_s=0.2)
        assert out.error == f"tool '{name}' timed out after 0.2 s"
        assert time.monotonic() - start < limit  # no waiting for the stubborn tool to finish


async def test_timeout_precedence():
    reg = ToolRegistry(default_timeout_s=0.1)

    @reg.tool(timeout_s=0.15)
    async def own() -> None:
        await asyncio.sleep(5)

    @reg.tool
    async def plain() -> None:
        await asyncio.sleep(5)

    assert (await reg.execute("own", {}, timeout_s=3)).error == "tool 'own' timed out after 0.15 s"
    assert (await reg.execute("plain", {}, timeout_s=0.12)).error.endswith("after 0.12 s")
    assert (await reg.execute("plain", {})).error.endswith("after 0.1 s")


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_cancel_propagates(reg, kind):
    stopped = asyncio.Event()
    if kind == "sync":
        reg.tool(name="slow")(lambda: time.sleep(2))
        stopped.set()  # a thread cannot be stopped; only the awaiting side is cancelled
    else:

        async def slow() -> None:
            try:
                await asyncio.sleep(5)
            finally:
                stopped.set()

        reg.tool(slow)
    task = asyncio.create_task(reg.execute("slow", {}, timeout_s=10))
    await asyncio.sleep(0.05)
    task.cancel()
    start = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - start < 0.5
    await asyncio.wait_for(stopped.wait(), 0.5)  # the async tool itself was cancelled too


async def test_context_vars_reach_sync_tools(reg):
    job = contextvars.ContextVar("job", default="none")

    @reg.tool
    def which() -> str:
        return job.get()

    job.set("job-7")
    assert (await reg.execute("which", {})).content == "job-7"


async def test_thread_cap_refuses_when_hung_tools_pile_up():
    reg = ToolRegistry(max_threads=1)
    release = threading.Event()

    @reg.tool
    def stuck() -> None:
        release.wait(5)

    try:
        assert "timed out" in (await reg.execute("stuck", {}, timeout_s=0.05)).error
        out = await reg.execute("stuck", {}, timeout_s=0.05)
        assert not out.ok and "still running" in out.error
    finally:
        release.set()


# ------------------------------------------------------------------------------ demo tools


@pytest.fixture
def demo() -> ToolRegistry:
    r = ToolRegistry()
    for fn in (demo_tools.superSecretTool, demo_tools.say, demo_tools.get_flumbuster, demo_tools.calculate_zorbix):
        r.tool(fn)
    return r


@pytest.mark.parametrize(
    "args, content",
    [
        ({"zorb": 15, "bix": 7}, "22"),
        ({"zorb": 15, "bix": 7, "mode": "sub"}, "8"),
        ({"zorb": 15, "bix": 7, "mode": "mul"}, "105"),
        ({"zorb": 15, "bix": 3, "mode": "div"}, "5"),
        ({"zorb": 7, "bix": 2, "mode": "div"}, "3.5"),
    ],
)
async def test_zorbix_modes(demo, args, content):
    out = await demo.execute("calculate_zorbix", args)
    assert (out.ok, out.content) == (True, content)


async def test_zorbix_division_by_zero(demo):
    out = await demo.execute("calculate_zorbix", {"zorb": 1, "bix": 0, "mode": "div"})
    assert (out.ok, out.error) == (False, "tool 'calculate_zorbix' failed: ValueError: division by zero")


async def test_super_secret_tool_and_say(demo):
    assert (await demo.execute("superSecretTool", {"a": 2535, "b": 32222000403})).content == "32222002938"
    assert (await demo.execute("say", {"text": "hi"})).content == "said: hi"
    say = demo.specs(["say"])[0]["function"]
    assert say["description"] == "Says something out loud (TTS)"
    assert say["parameters"]["properties"]["text"]["description"] == "The text to say out loud"
    assert demo.specs(["superSecretTool"])[0]["function"]["description"] == "Adds two numbers"


async def test_flumbuster_is_deterministic(demo):
    first = json.loads((await demo.execute("get_flumbuster", {"location": "Paris"})).content)
    again = json.loads((await demo.execute("get_flumbuster", {"location": " paris "})).content)
    north = json.loads((await demo.execute("get_flumbuster", {"location": "Paris", "uster": "north"})).content)
    assert first["flumbuster"] == again["flumbuster"] and 0 <= first["flumbuster"] < 1000
    assert first["uster"] == "standard" and north["uster"] == "north"
    assert north["flumbuster"] != first["flumbuster"]
    # Stable across processes too: sha256, not the salted hash().
    assert first["flumbuster"] == 158 and first["grade"] == "calm"
    p = demo.specs(["get_flumbuster"])[0]["function"]["parameters"]
    assert p["required"] == ["location"] and p["properties"]["uster"]["type"] == "string"


def test_load_tool_modules():
    reg = load_tool_modules(["worker.demo_tools", "worker.demo_tools"])  # importing twice is harmless
    assert reg is REGISTRY
    assert {"superSecretTool", "say", "get_flumbuster", "calculate_zorbix"} <= set(reg.names())
    with pytest.raises(ToolLoadError, match=r"cannot load tool module 'worker.no_such_tools'"):
        load_tool_modules(["worker.no_such_tools"])
