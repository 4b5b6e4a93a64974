"""The tool-call formats against the reference tool set (tests/support/seed.py): prompts, grammars, parsers."""

from __future__ import annotations

import json

import pytest

from tests.support.gbnf_match import accepts
from tests.support.seed import SEED_TOOLS as TOOLS  # the reference tool set
from toolq.wire.protocol import FunctionCall, ToolCall
from worker.formats import available_formats, get_format
from worker.formats.mixtral import unescape_underscores
from worker.formats.tagged import hermes_prompt
from worker.grammar import check_grammar

NAMES = {"superSecretTool", "say"}
SEED_ARGS = {"a": 2535, "b": 32222000403}
SEED_CALL = ToolCall(id="call_531873", function=FunctionCall(name="superSecretTool", arguments=SEED_ARGS))

# Tools that stress rule naming and schema handling.
ODD_TOOLS = TOOLS + [
    {
        "type": "function",
        "function": {
            "name": "get_weather.v2",
            "description": "odd name",
            "parameters": {
                "type": "object",
                "properties": {
                    "loc_name": {"type": "string", "description": "City"},
                    "unit": {"enum": ["c", "f"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "opt": {"type": ["number", "null"]},
                    "nested": {"type": "object", "properties": {'q"x': {"type": "boolean"}}},
                    "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                },
                "required": ["loc_name"],
            },
        },
    },
    {"type": "function", "function": {"name": "get-weather_v2", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "no_params"}},
    {"type": "function", "function": {"name": "名前", "parameters": {"type": "object", "properties": {"x": {}}}}},
]

FORMATS = ["hermes", "mixtral", "functionary_v2", "thoughtful_steps"]

# The reference system prompts, verbatim (the "with tools" prompts each format must reproduce).
SEED_TOOLS_SHORT = """Here are the tools available:
<tools>
{
  "type": "function",
  "function": {
    "name": "superSecretTool",
    "description": "Adds two numbers",
    "parameters": {
      "properties": {
        "a": {
          "type": "integer"
        },
        "b": {
          "type": "integer"
        }
      },
      "required": [
        "a",
        "b"
      ]
    }
  }
}
{
  "type": "function",
  "function": {
    "name": "say",
    "description": "Says something out loud (TTS)",
    "parameters": {
      "properties": {
        "text": {
          "description": "The text to say out loud",
          "type": "string"
        }
      },
      "required": [
        "text"
      ]
    }
  }
}
</tools>"""

SEED_TOOLS_LONG = """Call one or more functions to assist with the user query, every time this is possible. Don't make assumptions about what values to plug into functions. Here are the available tools:
<tools>
{
  "type": "function",
  "function": {
    "name": "superSecretTool",
    "description": "Adds two numbers",
    "parameters": {
      "properties": {
        "a": {
          "type": "integer"
        },
        "b": {
          "type": "integer"
        }
      },
      "required": [
        "a",
        "b"
      ]
    }
  }
}
{
  "type": "function",
  "function": {
    "name": "say",
    "description": "Says something out loud (TTS)",
    "parameters": {
      "properties": {
        "text": {
          "description": "The text to say out loud",
          "type": "string"
        }
      },
      "required": [
        "text"
      ]
    }
  }
}
</tools>

To call each function, give its name and arguments within <tool_call></tool_call> XML tags as follows:
<tool_call>
{"name": <function-name>, "arguments": <args-dict>}
</tool_call>"""

SEED_HERMES_2_PRO = """You are a function calling AI agent with self-recursion. You can call only one function at a time and analyse data you get from function response. You are provided with function signatures within <tools></tools> XML tags. The current date is: 2024-03-30. You may use agentic frameworks for reasoning and planning to help with user query. Please call a function and wait for function results to be provided to you in the next iteration. Don't make assumptions about what values to plug into function arguments. Once you have called a function, results will be fed back to you within <tool_response></tool_response> XML tags. Don't make assumptions about tool results if <tool_response> XML tags are not present since function hasn't been executed yet. Analyze the data once you get the results and call another function. At each iteration please continue adding the your analysis to previous summary. Your final response should directly answer the user query with an anlysis or summary of the results of function calls. Here are the available tools: <tools> ['{"type":"function","function":{"name":"superSecretTool","description":"Adds two numbers","parameters":{"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}', '{"type":"function","function":{"name":"say","description":"Says something out loud (TTS)","parameters":{"properties":{"text":{"description":"The text to say out loud","type":"string"}},"required":["text"]}}}'] </tools> If the provided function signatures doesn't have the function you must call, you may write executable python code in markdown syntax and call code_interpreter() function as follows: <tool_call> {"arguments": {"code_markdown": <python-code>, "name": "code_interpreter"}} </tool_call> Make sure that the json object above with code markdown block is parseable with json.loads() and the XML block with XML ElementTree. Use the following pydantic model json schema for each tool call you will make: {'properties': {'arguments': {'title': 'Arguments', 'type': 'object'}, 'name': {'title': 'Name', 'type': 'string'}}, 'required': ['arguments', 'name'], 'title': 'FunctionCall', 'type': 'object'} At the very first turn you don't have <tool_results> so you shouldn't not make up the results.
Please keep a running summary with analysis of previous function results and summaries from previous iterations.
Do not stop calling functions until the task has been accomplished or you've reached max iteration of 10.
Calling multiple functions at once can overload the system and increase cost so call one function at a time please.
If you plan to continue with analysis, always call another function.
For each function call return a valid json object (using doulbe quotes) with function name and arguments within <tool_call></tool_call> XML tags as follows:
<tool_call>
{"arguments": <args-dict>, "name": <function-name>}
</tool_call>
"""

SEED_FUNCTIONARY = """// Supported function definitions that should be called when necessary.
namespace functions {
// Adds two numbers
type superSecretTool = (_: {
a: number,
b: number
}) => any;

// Says something out loud (TTS)
type say = (_: {
// The text to say out loud
text: string
}) => any;
} // namespace functions"""

SEED_THOUGHTFUL = """You are a function calling AI model.
Here are the tools available:
{
  "type": "function",
  "function": {
    "name": "superSecretTool",
    "description": "Adds two numbers",
    "parameters": {
      "properties": {
        "a": {
          "type": "integer"
        },
        "b": {
          "type": "integer"
        }
      },
      "required": [
        "a",
        "b"
      ]
    }
  }
}
{
  "type": "function",
  "function": {
    "name": "say",
    "description": "Says something out loud (TTS)",
    "parameters": {
      "properties": {
        "text": {
          "description": "The text to say out loud",
          "type": "string"
        }
      },
      "required": [
        "text"
      ]
    }
  }
}
Please respond in JSON format with the following schema: {
  "type": "object",
  "properties": {
    "thought_about_next_step_only": {
      "title": "Thought about next step",
      "type": "string"
    },
    "next_step": {
      "title": "Next Step: either a result or one or more tool calls to achieve the original goal",
      "oneOf": [
        {
          "properties": {
            "tool_calls": {
              "prefixItems": [
                {
                  "properties": {
                    "name": {
                      "title": "Name of the tool to call",
                      "type": "string"
                    },
                    "arguments": {
                      "title": "Arguments to pass to the tool",
                      "type": "object"
                    }
                  },
                  "required": [
                    "name",
                    "arguments"
                  ]
                }
              ]
            }
          },
          "required": [
            "tool_calls"
          ]
        },
        {
          "title": "Result (achieving original goal)",
          "properties": {
            "result": {
              "type": "integer"
            }
          },
          "required": [
            "result"
          ]
        }
      ]
    }
  },
  "required": [
    "original_goal",
    "thought_about_next_step_only",
    "next_step"
  ]
}"""


def test_the_four_styles_are_registered():
    assert set(FORMATS) <= set(available_formats())
    for name in FORMATS:
        assert get_format(name).name == name


# ---------------------------------------------------------------- prompts against the reference


def test_hermes_short_prompt_is_the_seed():
    assert get_format("hermes").system_prompt(TOOLS, "short") == SEED_TOOLS_SHORT


def test_hermes_long_prompt_is_the_seed_and_the_default():
    assert get_format("hermes").system_prompt(TOOLS, "long") == SEED_TOOLS_LONG
    assert get_format("hermes").system_prompt(TOOLS) == SEED_TOOLS_LONG


def test_hermes_2_pro_prompt_is_the_seed():
    assert hermes_prompt(TOOLS, "hermes_2_pro", date="2024-03-30") == SEED_HERMES_2_PRO
    # Through the format, the date is today's; everything else is the same.
    text = get_format("hermes").system_prompt(TOOLS, "hermes_2_pro")
    assert text.split("The current date is:")[0] == SEED_HERMES_2_PRO.split("The current date is:")[0]


def test_unknown_hermes_variant_is_refused():
    with pytest.raises(ValueError, match="unknown hermes prompt variant"):
        get_format("hermes").system_prompt(TOOLS, "nope")


def test_mixtral_prompt_is_the_seed():
    assert get_format("mixtral").system_prompt(TOOLS) == SEED_TOOLS_LONG


def test_functionary_namespace_prompt_is_the_seed():
    assert get_format("functionary_v2").system_prompt(TOOLS) == SEED_FUNCTIONARY


def test_functionary_prompt_optional_and_typed_fields():
    text = get_format("functionary_v2").system_prompt(ODD_TOOLS)
    assert "// City\nloc_name: string," in text
    assert 'unit?: "c" | "f",' in text
    assert "tags?: string[]," in text
    assert "opt?: number | null," in text
    assert "type no_params = () => any;" in text


def test_thoughtful_prompt_matches_the_seed_on_its_essential_lines():
    mine = get_format("thoughtful_steps").system_prompt(TOOLS)
    head = "Please respond in JSON format with the following schema: "
    # Everything before the schema is the reference prompt's, byte for byte.
    assert mine.split(head)[0] == SEED_THOUGHTFUL.split(head)[0]
    schema = json.loads(mine.split(head)[1])
    seed_schema = json.loads(SEED_THOUGHTFUL.split(head)[1])
    assert schema["properties"].keys() == seed_schema["properties"].keys()
    assert (
        schema["properties"]["thought_about_next_step_only"]
        == seed_schema["properties"]["thought_about_next_step_only"]
    )
    steps = schema["properties"]["next_step"]["oneOf"]
    assert steps[0]["required"] == ["tool_calls"]
    # Deliberate differences: result is the answer text, any number of calls, no phantom key.
    assert steps[1]["properties"]["result"] == {"type": "string"}
    assert steps[0]["properties"]["tool_calls"]["items"]["required"] == ["name", "arguments"]
    assert schema["required"] == ["thought_about_next_step_only", "next_step"]


# ---------------------------------------------------------------- grammars


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("tools", [TOOLS, ODD_TOOLS, TOOLS[:1]], ids=["seed", "odd", "one"])
def test_every_generated_grammar_passes_the_check(name, tools):
    fmt = get_format(name)
    for grammar in (fmt.grammar(tools), fmt.grammar(tools, required=True), fmt.call_grammar(tools)):
        check_grammar(grammar)


@pytest.mark.parametrize("name", FORMATS)
def test_grammar_has_tool_name_constants_and_required_keys(name):
    g = get_format(name).grammar(TOOLS)
    assert "superSecretTool" in g and "say" in g
    assert '"\\"a\\"" space ":" space integer' in g
    assert '"\\"b\\"" space ":" space integer' in g
    assert '"\\"text\\"" space ":" space string' in g
    assert "space ::= " in g


@pytest.mark.parametrize("name", FORMATS)
def test_grammar_refuses_an_empty_tool_list(name):
    with pytest.raises(ValueError):
        get_format(name).grammar([])


def test_hermes_grammar_structure():
    fmt = get_format("hermes")
    g = fmt.grammar(TOOLS)
    assert g.startswith("root ::= content* (tool-call ws)*\n")
    assert 'tool-call ::= "<tool_call>" ws (superSecretTool-tool-call | say-tool-call) ws "</tool_call>"' in g
    assert fmt.grammar(TOOLS, required=True).startswith("root ::= tool-call (ws tool-call)*\n")
    assert fmt.call_grammar(TOOLS).startswith("root ::= tool-call\n")


SEED_HERMES_TEXT = '<tool_call>\n{"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}}\n</tool_call>'


def test_hermes_grammar_accepts_text_then_calls():
    fmt = get_format("hermes")
    g = fmt.grammar(TOOLS)
    two = SEED_HERMES_TEXT + "\n" + '<tool_call>\n{"name": "say", "arguments": {"text": "hi"}}\n</tool_call>'
    assert accepts(g, "Let me add them.\n" + two)
    assert accepts(g, "Just an answer.")
    assert not accepts(g, SEED_HERMES_TEXT + "\nand text after")
    assert not accepts(g, SEED_HERMES_TEXT.replace("superSecretTool", "otherTool"))
    assert not accepts(g, SEED_HERMES_TEXT.replace('"b": 32222000403', '"b": "x"'))
    assert not accepts(g, SEED_HERMES_TEXT.replace(', "b": 32222000403', ""))  # b is required


def test_hermes_required_grammar_is_calls_only():
    g = get_format("hermes").grammar(TOOLS, required=True)
    assert accepts(g, SEED_HERMES_TEXT)
    assert not accepts(g, "Let me add them.\n" + SEED_HERMES_TEXT)
    assert not accepts(g, "")


def test_hermes_call_grammar_starts_at_the_trigger():
    fmt = get_format("hermes")
    assert fmt.trigger == "<tool_call>"
    g = fmt.call_grammar(TOOLS)
    assert accepts(g, SEED_HERMES_TEXT)
    assert not accepts(g, "x" + SEED_HERMES_TEXT)


def test_mixtral_grammar_allows_escaped_underscores():
    fmt = get_format("mixtral")
    g = fmt.grammar(ODD_TOOLS)
    assert '"<tool" "\\\\"? "_" "call>"' in g
    escaped = '<tool\\_call>{"name": "get\\_weather.v2", "arguments": {"loc_name": "x"}}</tool\\_call>'
    assert accepts(g, escaped)
    assert accepts(g, SEED_HERMES_TEXT)
    assert fmt.call_grammar(TOOLS).startswith("root ::= tool-call\n")
    assert accepts(fmt.call_grammar(TOOLS), SEED_HERMES_TEXT.replace("tool_call", "tool\\_call"))


def test_functionary_grammar():
    g = get_format("functionary_v2").grammar(TOOLS)
    assert 'superSecretTool-call ::= "superSecretTool" "\\n<|content|>" "\\n"? superSecretTool-args "\\n"?' in g
    assert g.startswith(
        "root ::= content-without-start content* (tool-call+ content*)? | tool-call-without-start tool-call* content*\n"
    )
    call = 'superSecretTool\n<|content|>\n{"a": 2535, "b": 32222000403}\n'
    assert accepts(g, call)
    assert accepts(g, "all\n<|content|>Adding.<|from|>assistant\n<|recipient|>" + call)
    req = get_format("functionary_v2").grammar(TOOLS, required=True)
    assert accepts(req, call) and not accepts(req, "all\n<|content|>Adding.")
    # What the chat template writes (no newlines around the arguments) is allowed too.
    rendered = get_format("functionary_v2").render_tool_calls([SEED_CALL])
    assert accepts(g, rendered.removeprefix("<|from|>assistant\n<|recipient|>"))


def test_thoughtful_grammar():
    fmt = get_format("thoughtful_steps")
    g = fmt.grammar(TOOLS)
    assert g.startswith('root ::= "{" space thought-about-next-step-only-kv "," space next-step-kv "}" space\n')
    calls = '{"thought_about_next_step_only": "add", "next_step": {"tool_calls": [{"name": "superSecretTool", "arguments": {"a": 2535, "b": 32222000403}}, {"name": "say", "arguments": {"text": "hi"}}]}}'
    answer = '{"thought_about_next_step_only": "", "next_step": {"result": "It is 42."}}'
    assert accepts(g, calls) and accepts(g, answer)
    req = fmt.grammar(TOOLS, required=True)
    assert accepts(req, calls) and not accepts(req, answer)


@pytest.mark.parametrize("name", FORMATS)
def test_rendered_calls_parse_back(name):
    fmt = get_format(name)
    calls = [SEED_CALL, ToolCall(function=FunctionCall(name="say", arguments={"text": 'he said "hi" } </tool_call>'}))]
    out = fmt.parse(fmt.render_tool_calls(calls), NAMES)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [(c.name, c.arguments) for c in calls]
    assert out.errors == [] and not out.truncated_call


# ---------------------------------------------------------------- parsers of the other formats


def test_mixtral_parser_undoes_escaped_underscores():
    fmt = get_format("mixtral")
    text = 'Sure.\n<tool\\_call>\n{"name": "super\\_secret\\_tool", "arguments": {"a\\_b": 1}}\n</tool\\_call>'
    out = fmt.parse(text, {"super_secret_tool"})
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("super_secret_tool", {"a_b": 1})]
    assert out.content == "Sure."


def test_mixtral_keeps_a_real_escaped_backslash():
    # "\\_" in JSON is a backslash then an underscore: not a markdown escape.
    assert unescape_underscores(r'"a\\_b" c\_d e\\\_f') == r'"a\\_b" c_d e\\_f'


def test_mixtral_also_reads_plain_hermes_tags():
    out = get_format("mixtral").parse(SEED_HERMES_TEXT, NAMES)
    assert out.tool_calls[0].arguments == SEED_ARGS


def test_functionary_content_then_call():
    fmt = get_format("functionary_v2")
    text = 'all\n<|content|>Let me add.\n<|from|>assistant\n<|recipient|>superSecretTool\n<|content|>{"a": 2535, "b": 32222000403}\n<|stop|>'
    out = fmt.parse(text, NAMES)
    assert out.content == "Let me add."
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("superSecretTool", SEED_ARGS)]


def test_functionary_plain_answer():
    out = get_format("functionary_v2").parse("all\n<|content|>The sum is 42.<|stop|>", NAMES)
    assert out.content == "The sum is 42." and out.tool_calls == []


def test_functionary_text_without_markers_is_content():
    out = get_format("functionary_v2").parse("Hello there, friend.", NAMES)
    assert out.content == "Hello there, friend." and out.tool_calls == []


def test_functionary_truncated_call():
    out = get_format("functionary_v2").parse('superSecretTool\n<|content|>{"a": 25', NAMES)
    assert out.truncated_call and out.tool_calls == [] and "incomplete" in out.errors[0]
    out = get_format("functionary_v2").parse("superSecretTool", NAMES)
    assert out.truncated_call


def test_functionary_bad_arguments():
    out = get_format("functionary_v2").parse("say\n<|content|>hello there", NAMES)
    assert out.tool_calls == [] and out.errors[0].startswith("tool call 1 (say): arguments are not valid JSON")


def test_functionary_render():
    fmt = get_format("functionary_v2")
    assert fmt.render_tool_calls([SEED_CALL]) == (
        '<|from|>assistant\n<|recipient|>superSecretTool\n<|content|>{"a": 2535, "b": 32222000403}'
    )
    assert fmt.render_tool_result("superSecretTool", "call_531873", "32222002938") == "32222002938"
    assert fmt.stop == ("<|stop|>",)


def test_thoughtful_tool_calls_in_the_seed_shape():
    seed_turn = json.dumps(
        {
            "thought_about_next_step_only": "",
            "next_step": {
                "tool_calls": [
                    {
                        "id": "call_531873",
                        "type": "function",
                        "function": {"name": "superSecretTool", "arguments": SEED_ARGS},
                    }
                ]
            },
        },
        indent=2,
    )
    out = get_format("thoughtful_steps").parse(seed_turn, NAMES)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("superSecretTool", SEED_ARGS)]
    assert out.content == ""


def test_thoughtful_result_is_the_content():
    text = '{"thought_about_next_step_only": "done", "next_step": {"result": "The sum of 2535 and 32222000403 is 42."}}'
    out = get_format("thoughtful_steps").parse(text, NAMES)
    assert out.content == "The sum of 2535 and 32222000403 is 42." and out.tool_calls == []


def test_thoughtful_non_string_result_becomes_json_text():
    out = get_format("thoughtful_steps").parse('{"thought_about_next_step_only": "", "next_step": {"result": 42}}')
    assert out.content == "42"


def test_thoughtful_prose_is_the_answer():
    out = get_format("thoughtful_steps").parse("The answer is {x}.", NAMES)
    assert out.content == "The answer is {x}." and out.errors == []


def test_thoughtful_truncated_call():
    out = get_format("thoughtful_steps").parse(
        '{"thought_about_next_step_only": "", "next_step": {"tool_calls": [{"name": "say", "argu'
    )
    assert out.truncated_call and out.tool_calls == []


def test_thoughtful_missing_step_is_an_error():
    out = get_format("thoughtful_steps").parse('{"thought_about_next_step_only": "hmm"}')
    assert out.tool_calls == [] and "next_step" in out.errors[0]


def test_thoughtful_render_result():
    fmt = get_format("thoughtful_steps")
    assert fmt.render_tool_result("superSecretTool", "call_531873", "32222002938") == (
        "[TOOL(name=superSecretTool, id=call_531873)]32222002938[/TOOL]"
    )
    assert fmt.parse(fmt.render_final("It is 42.")).content == "It is 42."
