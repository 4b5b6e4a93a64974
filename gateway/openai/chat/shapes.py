"""Chat Completions bodies built from a job's terminal event: the completion, the stream's chunks
and the usage, in the shapes of openai.types.chat (ChatCompletion, ChatCompletionChunk) and
openai.types.CompletionUsage."""

from __future__ import annotations

import json
from typing import Any

from toolq.wire.payloads import FinalData

# toolq finish reasons -> OpenAI's. max_iterations: the loop's last round answered without tools.
FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "max_iterations": "stop"}


def usage(data: FinalData) -> dict[str, Any]:
    """CompletionUsage from the usage of a final event."""
    u = data.usage
    prompt, completion = u.prompt_tokens, u.completion_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
    }


def tool_calls(data: FinalData) -> list[dict[str, Any]]:
    """The final event's calls with arguments as a JSON string, as OpenAI returns them; each with
    the extension ``toolq.effect_key``, the key its effect goes by (toolq/tools/effects.py)."""
    effect_keys = data.effect_keys or {}
    out = []
    for c in data.tool_calls or ():
        call: dict[str, Any] = {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments or {}, ensure_ascii=False)},
        }
        if c.id in effect_keys:
            call["toolq"] = {"effect_key": effect_keys[c.id]}
        out.append(call)
    return out


def completion(completion_id: str, model: str, created: int, data: FinalData) -> dict[str, Any]:
    """A ChatCompletion from a final event's data."""
    calls = tool_calls(data)
    message: dict[str, Any] = {"role": "assistant", "content": data.content or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": FINISH.get(data.finish_reason, "stop"),
                "logprobs": None,
            }
        ],
        "usage": usage(data),
        "system_fingerprint": None,
    }


class ChunkWriter:
    """The chunks of one streamed completion; every chunk carries ``usage: null`` when the caller
    asked for the usage chunk, as OpenAI's do."""

    def __init__(self, completion_id: str, model: str, created: int, *, include_usage: bool):
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self.include_usage = include_usage

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out = {
            **self.head,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            "system_fingerprint": None,
        }
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, data: FinalData) -> dict[str, Any]:
        return {**self.head, "choices": [], "usage": usage(data), "system_fingerprint": None}
