"""Tools served by a tool service in tests and the benchmark (``toolq tools serve
tests.support.service_tools``). Their names differ from every worker tool, so a job can only reach
them through a service."""

from __future__ import annotations

import asyncio
import os

from toolq import tool


@tool
def convert_glorp(glorp: int, blap: int) -> int:
    """Convert a glorp into blaps: the glorp count times the blap rate.

    Args:
        glorp: How many glorps.
        blap: The blap rate.
    """
    return glorp * blap


@tool
async def whoami(n: int) -> str:
    """Which instance ran the call (its process id); waits a little, as remote work does."""
    await asyncio.sleep(0.05)
    return f"{os.getpid()}:{n}"


@tool
async def slow_glorp(glorp: int, seconds: float) -> str:
    """Answers after some seconds: a call that is still running when its instance is killed."""
    await asyncio.sleep(seconds)
    return f"slow glorp {glorp} done by {os.getpid()}"


@tool
def echo(text: str) -> str:
    """Returns its text: the benchmark's tool, the same one served locally and by a service."""
    return text
