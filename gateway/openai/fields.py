"""Every documented request field of Chat Completions and Responses, and what toolq does with it.

One table per endpoint, checked against the installed ``openai`` package's own request types
(tests/unit/test_openai_fields.py), so an SDK release that documents a new field fails a test
before it fails a user's request. Each field is one of:

- ``HONOURED``: declared on the request model (chat/request.py, responses/request.py) and acted on;
- ``HINT``: a hint about OpenAI's own service (caching, storage, abuse detection, service tier):
  any value is accepted and dropped, since no answer toolq gives depends on it;
- ``OFF``: a feature toolq does not have. A value that asks for nothing (absent, null, empty, or
  one of the documented defaults in ``off``) is accepted and dropped, because frameworks send
  these by default; any other value is a 400 in OpenAI's shape that names the field and says
  what toolq supports.

A field in no table is unknown and refused by the models' ``extra="forbid"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.openai.errors import OpenAIError

Handling = Literal["honoured", "hint", "off"]
HONOURED: Handling = "honoured"
HINT: Handling = "hint"
OFF: Handling = "off"


@dataclass(frozen=True)
class Row:
    handling: Handling
    off: tuple[Any, ...] = ()  # values besides null and empty that ask for nothing (documented defaults)
    supported: str = ""  # what toolq does instead, said in the refusal


def _hint() -> Row:
    return Row(HINT)


def _off(supported: str, *defaults: Any) -> Row:
    return Row(OFF, defaults, supported)


# Fields both endpoints document as hints about OpenAI's own service.
_HINT_NAMES = "store service_tier prompt_cache_key prompt_cache_options prompt_cache_retention safety_identifier"
_HINTS = {name: _hint() for name in _HINT_NAMES.split()}
_MODERATION = _off("toolq runs no moderation")
_NO_LOGPROBS = "toolq returns no log probabilities"
_TOP_P = "toolq samples with temperature only; top_p must be 1"
_REASONING = "the models toolq serves do not reason; only 'none' or the default 'medium' is accepted"

CHAT: Mapping[str, Row] = {
    **dict.fromkeys(
        """model messages tools tool_choice parallel_tool_calls max_tokens max_completion_tokens
        temperature seed stop response_format stream stream_options user metadata toolq""".split(),
        Row(HONOURED),
    ),
    **_HINTS,
    "n": _off("toolq gives one choice; n must be 1", 1),
    "logprobs": _off(_NO_LOGPROBS, False),
    "top_logprobs": _off(_NO_LOGPROBS, 0),
    "top_p": _off(_TOP_P, 1),
    "frequency_penalty": _off("toolq applies no frequency penalty; it must be 0", 0),
    "presence_penalty": _off("toolq applies no presence penalty; it must be 0", 0),
    "logit_bias": _off("toolq applies no logit bias; send it empty"),
    "modalities": _off("toolq answers in text only", ["text"]),
    "audio": _off("toolq answers in text only"),
    "prediction": _off("toolq has no predicted outputs"),
    "functions": _off("the legacy functions are not supported; use tools"),
    "function_call": _off("the legacy function_call is not supported; use tool_choice", "none", "auto"),
    "reasoning_effort": _off(_REASONING, "none", "medium"),
    "verbosity": _off("toolq has no verbosity setting; only the default 'medium' is", "medium"),
    "web_search_options": _off("toolq has no built-in web search; offer a function tool"),
    "moderation": _MODERATION,
}

RESPONSES: Mapping[str, Row] = {
    **dict.fromkeys(
        """model input instructions tools tool_choice parallel_tool_calls max_output_tokens temperature
        previous_response_id conversation background stream text metadata user toolq""".split(),
        Row(HONOURED),
    ),
    **_HINTS,
    # obfuscation pads stream events against length side channels; toolq pads nothing, whatever asked
    "stream_options": _hint(),
    "include": _off("toolq adds no extra output data; send it empty"),
    "top_p": _off(_TOP_P, 1),
    "top_logprobs": _off(_NO_LOGPROBS, 0),
    "truncation": _off("toolq does not truncate the input; only 'disabled' is supported", "disabled"),
    "reasoning": _off(_REASONING, {"effort": "none"}, {"effort": "medium"}),
    "context_management": _off("toolq does not compact the context"),
    "max_tool_calls": _off("toolq caps rounds with toolq.max_iterations, not max_tool_calls"),
    "prompt": _off("toolq has no stored prompt templates; send instructions and input"),
    "moderation": _MODERATION,
}


def essence(value: Any) -> Any:
    """What a value asks for: None for null and empty, a dict without its null or empty entries."""
    if isinstance(value, dict):
        kept = {k: e for k, v in value.items() if (e := essence(v)) is not None}
        return kept or None
    if value in ("", [], None):
        return None
    return value


def _asks_nothing(value: Any, spec: Row) -> bool:
    wanted = essence(value)
    return wanted is None or any(_same(wanted, essence(d)) for d in spec.off)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: 1 and 1.0 are the same number, but false is not 0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def screen(table: Mapping[str, Row], body: Any) -> Any:
    """The body with hints and values that ask for nothing dropped, for the request model's
    ``model_validator(mode="before")``. A value that asks for a feature toolq lacks raises the
    400 that names it (an ``OpenAIError``, which pydantic lets through to the app's handlers,
    so ``param`` names the field)."""
    if not isinstance(body, dict):
        return body
    out = {}
    for name, value in body.items():
        spec = table.get(name)
        if spec is None or spec.handling == HONOURED:
            out[name] = value
        elif spec.handling == OFF and not _asks_nothing(value, spec):
            raise OpenAIError(400, f"{name}: {_shown(value)} is not supported: {spec.supported}.", param=name)
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
