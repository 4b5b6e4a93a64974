"""The zorbix function as a caller defines it, in OpenAI's shapes: the tool that tests and
benchmarks offer a model (worker/demo_tools.py serves the same name)."""

from __future__ import annotations

from typing import Any

ZORBIX: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculate_zorbix",
        "description": "Calculate the zorbix of two whole numbers, zorb and bix.",
        "parameters": {
            "type": "object",
            "properties": {"zorb": {"type": "integer"}, "bix": {"type": "integer"}},
            "required": ["zorb", "bix"],
        },
    },
}
# The Responses API's shape: the function's fields beside "type", not under "function".
ZORBIX_RESPONSES: dict[str, Any] = {"type": "function", **ZORBIX["function"]}
