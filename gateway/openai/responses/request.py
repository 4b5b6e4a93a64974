"""The Responses API request (POST /v1/responses) and its translation into a toolq job.

Supported: ``model``, ``input`` (a string, or items: messages, ``function_call``,
``function_call_output``), ``instructions``, ``tools`` (function tools, Responses' flat shape),
``tool_choice``, ``parallel_tool_calls``, ``max_output_tokens``, ``temperature``,
``previous_response_id``, ``background``, ``stream``, ``text.format`` (json_object, json_schema),
``metadata``, ``user``, and the ``toolq`` extension (gateway/openai/shared.py). OpenAI's
other fields are screened by the table of gateway/openai/fields.py, as in chat completions; any
other field is a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from gateway.openai import fields, shared
from gateway.openai.errors import OpenAIError
from gateway.openai.shared import ToolqOptions, text_of
from toolq.wire.protocol import STORED, FunctionSpec, FunctionTool, JobRequest, Message, ToolCall


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FunctionToolParam(_Strict):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def spec(self, context: dict[str, Any] | None = STORED) -> FunctionSpec:
        """As a chat completions function; its schema checks are made once, at validation
        (``context`` None), not again at each conversion."""
        spec = {
            "name": self.name,
            "description": self.description or "",
            "parameters": self.parameters,
            "strict": self.strict,
        }
        return FunctionSpec.model_validate(spec, context=context)

    @model_validator(mode="after")
    def _valid(self, info: ValidationInfo) -> FunctionToolParam:
        self.spec(info.context)  # the same rules as a chat completions function (name, schema)
        return self


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the default; other values change the answer


class ConversationRef(_Strict):
    id: str = Field(min_length=1, max_length=128)


class ResponsesRequest(_Strict):
    model: str = Field(min_length=1, max_length=256)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[FunctionToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    previous_response_id: str | None = Field(default=None, max_length=128)
    # a conversation (gateway/openai/conversations.py) as its id or {"id": ...}
    conversation: Annotated[str, Field(min_length=1, max_length=128)] | ConversationRef | None = None
    background: bool | None = None
    stream: bool | None = None
    text: TextConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = Field(default=None, max_length=256)
    toolq: ToolqOptions | None = None

    @model_validator(mode="after")
    def _one_history(self) -> ResponsesRequest:
        if self.conversation is not None and self.previous_response_id is not None:
            raise ValueError("conversation and previous_response_id cannot be used together")
        return self

    @model_validator(mode="before")
    @classmethod
    def _screen(cls, body: Any) -> Any:
        return fields.screen(fields.RESPONSES, body)


def input_messages(items: str | list[dict[str, Any]]) -> list[Message]:
    """The input as toolq messages: consecutive function_call items are one assistant turn."""
    if isinstance(items, str):
        return [Message(role="user", content=items)]
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        try:
            if kind == "message" and item.get("role") in ("user", "system", "developer", "assistant"):
                text = text_of(item.get("content"), f"{where}.content") or ""
                role = "system" if item["role"] == "developer" else item["role"]
                out.append(Message.model_validate({"role": role, "content": text}))
            elif kind == "function_call":
                call = ToolCall.model_validate(
                    {"id": item["call_id"], "function": {"name": item["name"], "arguments": item.get("arguments")}}
                )
                names[call.id] = call.name
                if out and out[-1].role == "assistant":
                    out[-1].tool_calls = [*(out[-1].tool_calls or []), call]
                else:
                    out.append(Message(role="assistant", tool_calls=[call]))
            elif kind == "function_call_output":
                result = text_of(item.get("output"), f"{where}.output") or ""
                cid = str(item["call_id"])
                out.append(Message(role="tool", tool_call_id=cid, name=names.get(cid), content=result))
            else:
                raise OpenAIError(
                    400,
                    f"{where}: only message, function_call and function_call_output items are supported, not {kind!r}",
                    param=where,
                )
        except (KeyError, TypeError) as e:
            raise OpenAIError(400, f"{where}: missing or invalid field {e}", param=where) from None
        except ValueError as e:
            raise OpenAIError(400, f"{where}: {e}", param=where) from None
    return out


def answer_format(text: TextConfig | None) -> dict[str, Any] | None:
    fmt = text.format if text else None
    if fmt is None:
        return None
    missing = OpenAIError(400, "text.format json_schema needs a schema", param="text.format.schema")
    return shared.answer_format(fmt.type, fmt.schema_, fmt.name, missing=missing)


def to_job(req: ResponsesRequest, earlier: list[Message]) -> JobRequest:
    """The job: instructions, then the previous response's transcript (``earlier``, without its
    instructions, as OpenAI does not carry them over), then the input. The caller's function
    tools end the job with their calls, as in chat completions (gateway/openai/shared.py: to_job)."""
    messages = ([Message(role="system", content=req.instructions)] if req.instructions else []) + earlier
    messages += input_messages(req.input)
    choice: Any = req.tool_choice or "auto"
    if isinstance(choice, NamedFunction):
        choice = {"type": "function", "function": {"name": choice.name}}
    return shared.to_job(
        [m.model_dump(mode="json", exclude_none=True) for m in messages],
        req.toolq,
        metadata=req.metadata,
        user=req.user,
        model=req.model,
        tools=[FunctionTool(function=t.spec()) for t in req.tools or ()],
        tool_choice=choice,
        stream_tokens=bool(req.stream),
        response_format=answer_format(req.text),
        parallel_tool_calls=req.parallel_tool_calls,
        max_tokens=req.max_output_tokens,
        temperature=req.temperature,
    )
