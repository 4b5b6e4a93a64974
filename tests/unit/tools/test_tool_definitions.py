"""Tool definitions in a request (toolq/wire/protocol.py FunctionTool, toolq/wire/definitions.py): every
bad one is refused with a message that names the tool and the problem."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toolq.tools.schema_tool import SchemaTool
from toolq.wire.limits import MAX_TOOLS
from toolq.wire.protocol import JobRequest, Message


def request(tools: list[Any], **kw: Any) -> JobRequest:
    return JobRequest(messages=[Message(role="user", content="hi")], tools=tools, **kw)


def fn(name: str = "lookup", parameters: Any = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "description": "Looks a thing up."}
    if parameters is not None:
        body["parameters"] = parameters
    return {"type": "function", "function": body, **extra}


OBJ = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def refused(tools: list[Any], **kw: Any) -> str:
    with pytest.raises(ValidationError) as e:
        request(tools, **kw)
    return str(e.value)


def test_names_and_definitions_mix():
    r = request(["calculate_zorbix", fn(parameters=OBJ)])
    assert r.tool_names() == ["calculate_zorbix", "lookup"]
    assert r.served_tool_names() == ["calculate_zorbix"]
    assert [t.name for t in r.client_tools()] == ["lookup"]


def test_a_definition_without_parameters_takes_no_arguments():
    [t] = request([fn()]).client_tools()
    assert t.spec()["function"]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([fn(name="has space", parameters=OBJ)], "tool name 'has space' is invalid"),
        ([fn(name="x" * 65, parameters=OBJ)], "is invalid"),
        (["bad name!"], "tool name 'bad name!' is invalid"),
        ([fn(parameters={"type": "object", "properties": {"q": {"type": "strng"}}})], "not a valid JSON Schema at"),
        ([fn(parameters={"type": "array"})], 'must describe an object ("type": "object")'),
        ([fn(parameters=[1, 2])], "Input should be a valid dictionary"),
        ([fn(parameters={"$ref": "https://example.com/s.json"})], "points outside the schema"),
        ([fn(parameters=OBJ), fn(parameters=OBJ)], "tool 'lookup' is listed twice"),
        (["add", "add"], "tool 'add' is listed twice"),
        ([fn(parameters=OBJ, execution="server")], "a server tool's parameters come from the tool itself"),
        ([fn(parameters=OBJ, execution="elsewhere")], "execution"),
        ([fn(parameters={"type": "object", "properties": {"q": {"description": "x" * 40000}}})], "above the limit"),
    ],
)
def test_bad_definitions_are_refused_with_the_tool_and_the_problem(tools, says):
    assert says in refused(tools)


def test_schema_errors_name_the_tool():
    text = refused([fn(name="search", parameters={"type": "object", "properties": {"n": {"minimum": "one"}}})])
    assert "tool 'search'" in text and "properties/n/minimum" in text


def test_too_many_tools():
    text = refused([fn(name=f"t{i}", parameters=OBJ) for i in range(MAX_TOOLS + 1)])
    assert f"at most {MAX_TOOLS} items" in text


def test_tool_choice_may_name_a_client_tool():
    r = request([fn(parameters=OBJ)], tool_choice={"type": "function", "function": {"name": "lookup"}})
    assert r.forced_tool() == "lookup"
    assert "not in tools" in refused([fn(parameters=OBJ)], tool_choice={"function": {"name": "other"}})


def test_schema_tool_enforces_what_a_grammar_cannot():
    t = SchemaTool(
        "book",
        "Books a room.",
        {
            "type": "object",
            "properties": {
                "nights": {"type": "integer", "minimum": 1, "maximum": 14},
                "email": {"type": "string", "pattern": "^[^@]+@[^@]+$"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            },
            "required": ["nights", "email"],
            "additionalProperties": False,
        },
    )
    assert t.check({"nights": 2, "email": "a@b"}).ok
    bad = t.check({"nights": 30, "email": "nope", "tags": ["a", "a"], "extra": 1})
    text = " | ".join(bad.errors)
    assert "argument 'nights': 30 is greater than the maximum of 14" in text
    assert "argument 'email'" in text and "does not match" in text
    assert "argument 'tags'" in text and "non-unique" in text
    assert "'extra' was unexpected" in text and "book takes: nights (integer, required)" in text
    missing = t.check({"nights": 1})
    assert missing.errors == [
        "'email' is a required property (book takes: nights (integer, required), email (string, required), "
        "tags (array of strings, optional))"
    ]
    assert "must be a JSON object" in t.check([1]).errors[0]
