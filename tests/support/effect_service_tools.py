"""The effects soak's tool service tool (bench/chaos_effects.py): ``effect_there`` sends one keyed
effect to the sink (tests/support/effect_sink.py) and holds; it has no ``idempotent`` declaration,
so it takes a tool service's default (true: its calls are delivered at least once already)."""

from __future__ import annotations

import asyncio

from tests.support.effect_sink import send_effect
from toolq.tools import current_call, tool


@tool
async def effect_there(marker: str, hold_ms: int = 0) -> str:
    """Sends one effect for a marker from a tool service, then holds hold_ms."""
    await asyncio.to_thread(send_effect, "effect_there", current_call().key, marker)
    await asyncio.sleep(hold_ms / 1000)
    return f"effect_there {marker} sent"
