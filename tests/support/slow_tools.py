"""calculate_zorbix as a tool that waits like a remote call: the workload benchmark's tool.

The same name, docstring and signature (so the same schema and the same prompt) as the demo tool
in worker/demo_tools.py, and the same value, returned after an ``await asyncio.sleep``, as an HTTP
call would take: while it waits, the job holds no decode capacity. The wait is
``TOOLQ_BENCH_TOOL_DELAY_S`` seconds (default 0.5), read per call from the worker's environment.
A worker serves it instead of the demo one (``--tools tests.support.slow_tools``): two tools of
one name cannot be registered in one process.
"""

from __future__ import annotations

import asyncio
import os
from typing import Literal

from toolq.tools import tool

DELAY_ENV = "TOOLQ_BENCH_TOOL_DELAY_S"


@tool
async def calculate_zorbix(zorb: int, bix: int, mode: Literal["add", "sub", "mul", "div"] = "add") -> int | float:
    """Calculate the zorbix of two whole numbers, zorb and bix.

    The zorbix combines zorb and bix with the chosen mode: "add" (zorb + bix, the default),
    "sub" (zorb - bix), "mul" (zorb * bix) or "div" (zorb / bix).

    Args:
        zorb: The first whole number.
        bix: The second whole number.
        mode: How to combine them: "add", "sub", "mul" or "div".
    """
    await asyncio.sleep(float(os.environ.get(DELAY_ENV, "0.5")))
    if mode == "add":
        return zorb + bix
    if mode == "sub":
        return zorb - bix
    if mode == "mul":
        return zorb * bix
    if bix == 0:
        raise ValueError("division by zero")
    quotient, remainder = divmod(zorb, bix)  # an exact quotient stays a whole number, as in the demo tool
    return quotient if remainder == 0 else zorb / bix
