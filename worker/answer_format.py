"""response_format: the grammar that makes the final answer JSON (matching the caller's schema),
and the check of the answer once written.

The grammar comes from llama.cpp's own JSON-Schema converter (worker/grammar/schema_grammar.py,
through the GrammarBuilder), which cannot express every keyword (``minimum``, ``format``...): the
answer is validated with jsonschema afterwards, and an answer that still does not match ends the
job with an engine error rather than reaching the caller as if it did.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from toolq.wire.protocol import ResponseFormat
from toolq.wire.re2_validator import Re2Draft202012Validator
from worker.generation import EngineError
from worker.grammar.tasks import schema_grammar_text

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class AnswerFormatError(EngineError):
    """The answer does not match the requested response_format."""


def _schema(fmt: ResponseFormat) -> dict[str, Any]:
    return fmt.json_schema if fmt.type == "json_schema" and fmt.json_schema is not None else _ANY_OBJECT


def answer_schema_json(fmt: ResponseFormat) -> str:
    """The schema an answer of this format must match, as the JSON its grammar is built from."""
    return json.dumps(_schema(fmt), sort_keys=True)


@lru_cache(maxsize=64)
def _grammar(schema_json: str) -> str:
    return schema_grammar_text(schema_json)


def answer_grammar(fmt: ResponseFormat) -> str:
    """GBNF for one JSON value of the format's schema (any object for json_object); checked,
    in this process (for tests and tools; the worker builds it in a build process)."""
    return _grammar(answer_schema_json(fmt))


def answer_problem(fmt: ResponseFormat, text: str) -> str | None:
    """Why ``text`` is not an answer of this format, or None when it is."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"the answer is not valid JSON ({e.msg})"
    errors = sorted(Re2Draft202012Validator(_schema(fmt)).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        return f"the answer does not match the response format's schema at {where}: {errors[0].message}"
    return None
