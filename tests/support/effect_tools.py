"""The effects soak's tools (bench/chaos_effects.py): each sends one effect, keyed with its call's
effect key, to the sink in another process (tests/support/effect_sink.py), then holds for
``hold_ms``, the window in which the soak kills the process running it.

``effect_here`` runs in the worker; ``effect_there`` is served by a tool service
(tests/support/effect_service_tools.py); ``effect_journaled`` acts through the effect journal
(``current_call().once``), so its run again after a lost attempt finds the record and does not act.
All three are declared idempotent: the sink deduplicates by key, so a second run under the key
has no second effect there.
"""

from __future__ import annotations

import asyncio

from tests.support.effect_sink import send_effect
from toolq.tools import current_call, tool


@tool(idempotent=True)
async def effect_here(marker: str, hold_ms: int = 0) -> str:
    """Sends one effect for a marker from the worker, then holds hold_ms."""
    await asyncio.to_thread(send_effect, "effect_here", current_call().key, marker)
    await asyncio.sleep(hold_ms / 1000)
    return f"effect_here {marker} sent"


@tool(idempotent=True)
async def effect_journaled(marker: str, hold_ms: int = 0) -> str:
    """Sends one effect for a marker through the effect journal, then holds hold_ms."""
    call = current_call()
    await call.once(lambda: asyncio.to_thread(send_effect, "effect_journaled", call.key, marker))
    await asyncio.sleep(hold_ms / 1000)
    return f"effect_journaled {marker} sent"
