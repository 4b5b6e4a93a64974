"""Generic JSON format for models with no tool format of their own.

Every reply is one JSON object::

    {"thought_about_next_step_only": "...",
     "next_step": {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} | {"result": "..."}}

``result`` is the final answer, a string (not the integer of the original prompt, which suited
only its arithmetic example). tests/unit/test_formats.py pins the prompt and these differences.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from toolq.wire.protocol import ToolCall
from worker import jsonish
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition
from worker.formats.common import call_from_value, tool_name, tool_params, tools_block
from worker.grammar import GrammarBuilder, literal

THOUGHT = "thought_about_next_step_only"

RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {
        THOUGHT: {"title": "Thought about next step", "type": "string"},
        "next_step": {
            "title": "Next Step: either a result or one or more tool calls to achieve the original goal",
            "oneOf": [
                {
                    "properties": {
                        "tool_calls": {
                            "items": {
                                "properties": {
                                    "name": {"title": "Name of the tool to call", "type": "string"},
                                    "arguments": {"title": "Arguments to pass to the tool", "type": "object"},
                                },
                                "required": ["name", "arguments"],
                            },
                            "minItems": 1,
                        }
                    },
                    "required": ["tool_calls"],
                },
                {
                    "title": "Result (achieving original goal)",
                    "properties": {"result": {"type": "string"}},
                    "required": ["result"],
                },
            ],
        },
    },
    "required": [THOUGHT, "next_step"],
}


def thoughtful_prompt(tools: Sequence[ToolDefinition]) -> str:
    return (
        "You are a function calling AI model.\n"
        "Here are the tools available:\n"
        f"{tools_block(tools)}\n"
        f"Please respond in JSON format with the following schema: {json.dumps(RESPONSE_SCHEMA, indent=2)}"
    )


def _read_step(step: dict) -> ParsedOutput:
    if "tool_calls" in step:
        calls = step["tool_calls"]
        calls = calls if isinstance(calls, list) else [calls]
        out = ParsedOutput(content="")
        for i, raw in enumerate(calls, 1):
            r = call_from_value(raw, i)
            if isinstance(r, ToolCall):
                out.tool_calls.append(r)
            else:
                out.errors.append(r)
        if not calls:
            out.errors.append('"tool_calls" is empty: give at least one call, or a "result"')
        return out
    if "result" in step:
        result = step["result"]
        return ParsedOutput(content=result if isinstance(result, str) else jsonish.dumps(result))
    return ParsedOutput(content="", errors=['the reply needs "next_step" with either "tool_calls" or "result"'])


def parse_thoughtful(text: str) -> ParsedOutput:
    try:
        body = jsonish.strip_fence(text)
        start = body.find("{")
        # The reply should be the object alone; prose before it is tolerated only when the
        # object is clearly ours (it has next_step), so "{x}" in a plain answer stays text.
        strict = start == 0
        if start == -1:
            return ParsedOutput(content=text.strip())
        scan = jsonish.scan_value(body, start)
        if not scan.complete:
            if strict and ('"tool_calls"' in body or "'tool_calls'" in body):
                return ParsedOutput(
                    content="",
                    errors=["tool call 1 is incomplete: the output ended before the JSON object was closed"],
                    truncated_call=True,
                )
            return ParsedOutput(content=text.strip())
        try:
            value = jsonish.loads(body[start : scan.end])
        except jsonish.JsonishError as e:
            if strict:
                return ParsedOutput(content="", errors=[f"the reply is not valid JSON: {e}"])
            return ParsedOutput(content=text.strip())
        if isinstance(value, dict) and isinstance(value.get("next_step"), dict):
            return _read_step(value["next_step"])
        if strict and isinstance(value, dict):
            return _read_step(value)  # a flattened reply: {"tool_calls": [...]} or {"result": ...}
        return ParsedOutput(content=text.strip())
    except Exception as e:  # pragma: no cover - the fuzz test keeps this unreachable
        return ParsedOutput(content=str(text), errors=[f"internal parser error: {type(e).__name__}: {e}"])


class ThoughtfulStepsFormat(ToolCallFormat):
    name = "thoughtful_steps"
    trigger = None  # the whole reply is the JSON object; nothing to wait for
    opens_at_start = True
    stop = ()

    def system_prompt(self, tools: Sequence[ToolDefinition], variant: str | None = None) -> str:
        return thoughtful_prompt(tools)

    def grammar(self, tools: Sequence[ToolDefinition], *, required: bool = False) -> str:
        b = GrammarBuilder()
        calls = []
        for i, tool in enumerate(tools):
            base = f"next-step-0-tool-calls-item-{i}"
            name = literal(json.dumps(tool_name(tool), ensure_ascii=False))
            calls.append(b.call_object(base, name, tool_params(tool)))
        if not calls:
            raise ValueError("a tool-call grammar needs at least one tool")
        item = b.add("next-step-0-tool-calls-item", " | ".join(calls))
        listed = b.add("next-step-0-tool-calls", f'"[" space {item} ("," space {item})* "]" space')
        kv = b.add("next-step-0-tool-calls-kv", f'"\\"tool_calls\\"" space ":" space {listed}')
        step_calls = b.add("next-step-0", f'"{{" space {kv} "}}" space')
        if required:
            step = step_calls
        else:
            string = b.primitive("string")
            result_kv = b.add("next-step-1-result-kv", f'"\\"result\\"" space ":" space {string}')
            b.add("next-step-1", f'"{{" space {result_kv} "}}" space')
            step = b.add("next-step", "next-step-0 | next-step-1")
        step_kv = b.add("next-step-kv", f'"\\"next_step\\"" space ":" space {step}')
        thought = b.add("thought-about-next-step-only-kv", f'"\\"{THOUGHT}\\"" space ":" space {b.primitive("string")}')
        b.add("root", f'"{{" space {thought} "," space {step_kv} "}}" space')
        return b.render()

    def call_grammar(self, tools: Sequence[ToolDefinition]) -> str:
        return self.grammar(tools, required=True)

    def parse(self, text: str, tool_names: set[str] | None = None) -> ParsedOutput:
        return parse_thoughtful(text)

    def render_tool_calls(self, calls: Sequence[ToolCall]) -> str:
        step = {"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls]}
        return json.dumps({THOUGHT: "", "next_step": step}, indent=2, ensure_ascii=False)

    def render_final(self, content: str) -> str:
        """An answer in this format (for transcripts of earlier turns)."""
        return json.dumps({THOUGHT: "", "next_step": {"result": content}}, indent=2, ensure_ascii=False)

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        # How results are shown to models with no tool role of their own.
        return f"[TOOL(name={name}, id={call_id})]{content}[/TOOL]"


FORMAT = ThoughtfulStepsFormat()
