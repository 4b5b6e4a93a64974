"""The MCP server list from settings, the naming and checking of MCP tools, and results as text."""

from __future__ import annotations

import pytest
from mcp import types

from toolq.mcp import McpServerConfig, parse_servers
from toolq.mcp.naming import name_tools
from toolq.mcp.results import MAX_RESULT_CHARS, result_text

OBJ = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def tool(name: str, schema: dict | None = None) -> types.Tool:
    return types.Tool(name=name, description=f"{name} tool", inputSchema=schema if schema is not None else OBJ)


def test_parse_servers_both_transports_and_empty():
    servers = parse_servers(
        '[{"name": "files", "command": ["python", "-m", "x"], "env": {"A": "1"}}, {"name": "web", "url": "http://h:1/mcp"}]'
    )
    assert [s.name for s in servers] == ["files", "web"]
    assert servers[0].command == ["python", "-m", "x"] and servers[0].env == {"A": "1"}
    assert servers[1].url == "http://h:1/mcp"
    assert parse_servers(None) == [] and parse_servers("  ") == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[", "MCP servers: not JSON"),
        ('{"name": "a"}', "expected a JSON list"),
        ('["x"]', "MCP server #1: expected an object, not str"),
        ('[{"name": "a"}]', "MCP server #1 ('a'): Value error, give exactly one of"),
        ('[{"name": "a", "command": ["x"], "url": "http://h"}]', "MCP server #1 ('a'): Value error, give exactly one"),
        ('[{"name": "a", "command": []}]', "MCP server #1 ('a'): command: List should have at least 1 item"),
        ('[{"name": "a", "url": "ftp://h"}]', "MCP server #1 ('a'): url: String should match pattern"),
        ('[{"name": "a", "url": "http://h", "env": {}}]', '"env" and "cwd" apply to a stdio "command" only'),
        ('[{"name": "a b", "url": "http://h"}]', "MCP server #1 ('a b'): name: String should match pattern"),
        ('[{"name": "a", "url": "http://h", "colour": 1}]', "colour: Extra inputs are not permitted"),
        ('[{"name": "a", "url": "http://h"}, {"name": "a", "url": "http://i"}]', "MCP server #2 ('a'): the name 'a'"),
    ],
)
def test_parse_servers_names_the_bad_entry(raw, message):
    with pytest.raises(ValueError) as e:
        parse_servers(raw)
    assert message in str(e.value)


def test_unique_names_kept_and_collisions_prefixed_on_every_side():
    a = McpServerConfig(name="a", url="http://h")
    b = McpServerConfig(name="b", url="http://h", requires_approval=["write"])
    cat = name_tools([(a, [tool("read"), tool("only_a")]), (b, [tool("read"), tool("write")])])
    assert sorted(cat) == ["a_read", "b_read", "only_a", "write"]
    assert cat["a_read"].remote_name == "read" and cat["a_read"].server == "a"
    assert cat["write"].schema.requires_approval and not cat["only_a"].schema.requires_approval
    # a name the worker's own tools use is prefixed too
    cat = name_tools([(a, [tool("calculate_zorbix")])], reserved={"calculate_zorbix"})
    assert list(cat) == ["a_calculate_zorbix"]


def test_invalid_schemas_and_names_are_skipped_with_a_warning(capsys):
    a = McpServerConfig(name="a", url="http://h", timeout_s=3)
    listing = [
        tool("good"),
        tool("bad_schema", {"type": "object", "properties": {"x": {"type": 5}}}),
        tool("not_object", {"type": "array"}),
        tool("dotted.name"),
        tool("x" * 65),
    ]
    cat = name_tools([(a, listing)])
    assert list(cat) == ["good"]
    assert cat["good"].schema.timeout_s == 3
    out = capsys.readouterr().out
    for name in ("bad_schema", "not_object", "dotted.name"):
        assert f"tool={name}" in out and "mcp_tool_skipped" in out


def test_checked_like_any_schema_tool():
    cat = name_tools([(McpServerConfig(name="a", url="http://h"), [tool("t")])])
    assert cat["t"].schema.check({"x": 1}).kwargs == {"x": 1}
    bad = cat["t"].schema.check({"x": "1"})
    assert bad.kwargs is None and "'1' is not of type 'integer'" in bad.errors[0]
    assert cat["t"].schema.spec()["function"] == {"name": "t", "description": "t tool", "parameters": OBJ}


def test_result_text():
    text = types.TextContent(type="text", text="22")
    assert result_text(types.CallToolResult(content=[text], structuredContent={"result": 22})) == "22"
    assert result_text(types.CallToolResult(content=[], structuredContent={"a": [1, "é"]})) == '{"a":[1,"é"]}'
    two = types.CallToolResult(content=[text, types.TextContent(type="text", text="33")])
    assert result_text(two) == "22\n33"
    image = types.ImageContent(type="image", data="AAAA", mimeType="image/png")
    assert result_text(types.CallToolResult(content=[image, text])) == "[image (image/png)]\n22"
    big = types.CallToolResult(content=[types.TextContent(type="text", text="y" * (MAX_RESULT_CHARS + 10))])
    assert result_text(big).endswith("[... 10 more characters cut]")
