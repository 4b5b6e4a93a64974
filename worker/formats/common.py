"""What the tool-call formats share: reading a tool definition, reading a decoded call object,
and listing tools in a prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from toolq.protocol import FunctionCall, ToolCall
from worker import jsonish
from worker.formats.base import ToolDefinition


def tools_block(tools: Sequence[ToolDefinition]) -> str:
    """Tools as the Hermes and thoughtful-steps prompts list them: each definition as indented JSON."""
    return "\n".join(json.dumps(t, indent=2, ensure_ascii=False) for t in tools)


def tool_name(tool: ToolDefinition) -> str:
    return (tool.get("function") or tool).get("name", "")


def tool_params(tool: ToolDefinition) -> dict:
    """The tool's parameters schema; always an object schema (arguments are an object)."""
    params = (tool.get("function") or tool).get("parameters")
    params = params if isinstance(params, dict) else {}
    return params if params.get("type") == "object" else {**params, "type": "object"}


def call_from_value(value: Any, n: int) -> ToolCall | str:
    """A ToolCall from one decoded call object, or a readable error for call number n.

    Accepts {"name", "arguments"}, "parameters" for "arguments", arguments as a JSON string,
    null or missing arguments, and the OpenAI shape {"type": "function", "function": {...}}.
    Any "id" the model wrote is ignored: ids are ours, so a copied id can never collide.
    """
    if not isinstance(value, dict):
        return f'tool call {n} must be a JSON object with "name" and "arguments", not {type(value).__name__}'
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'tool call {n} has no "name": write {{"name": <function-name>, "arguments": <args-dict>}}'
    name = name.strip()
    if "arguments" in value:
        args = value["arguments"]
    else:
        args = value.get("parameters")
    if args is None:
        args = {}
    if isinstance(args, str):
        if not args.strip():
            args = {}
        else:
            try:
                args = jsonish.loads(args)
            except jsonish.JsonishError as e:
                return f"tool call {n} ({name}): arguments is a string that is not valid JSON: {e}"
    if not isinstance(args, dict):
        return f"tool call {n} ({name}): arguments must be a JSON object, not {type(args).__name__}"
    try:
        return ToolCall(function=FunctionCall(name=name, arguments=args))
    except ValidationError as e:
        first = e.errors()[0]
        return f"tool call {n} ({name[:40]}): {first.get('msg', 'invalid')}"


def calls_from_value(value: Any, n: int) -> list[ToolCall | str]:
    """One decoded block may hold one call or a list of them."""
    if isinstance(value, list):
        if not value:
            return [f"tool call {n} is an empty list"]
        return [call_from_value(v, n + i) for i, v in enumerate(value)]
    return [call_from_value(value, n)]
