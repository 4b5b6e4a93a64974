# ruff: noqa: RUF001 - DeepSeek's markers are spelled with fullwidth bars (U+FF5C).
"""Which tool-call format a chat template teaches, read from its source (``--format auto``).

A template that renders tool calls writes them in its family's markup, so the markup names the
format, as llama.cpp's common/chat.cpp finds it. Signatures are tried most specific first: many
families also mention ``<tool_call>`` or ``<function=``, so the generic Hermes tag comes last but
one, and Llama 3's bare JSON (known only by its ``ipython`` role) last.
"""

from __future__ import annotations

# (format, every string the source must contain), most specific first.
SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt_oss", ("<|channel|>", "commentary", "functions.")),
    # DSML templates build their tags from a variable holding the marker
    ("deepseek_v4", ("｜DSML｜", "tool_calls>")),
    ("deepseek_v3_2", ("｜DSML｜", "function_calls>")),
    ("deepseek_r1", ("tool▁calls▁begin", "```json")),
    ("deepseek_v3_1", ("tool▁calls▁begin", "tool▁sep")),
    ("kimi_k2", ("<|tool_calls_section_begin|>",)),
    ("command_r7b", ("<|START_ACTION|>",)),
    ("command_r", ("Action:", "```json", "tool_name")),
    ("granite", ("<|tool_call|>",)),
    ("mistral_args", ("[TOOL_CALLS]", "[ARGS]")),
    ("mistral", ("[TOOL_CALLS]",)),
    ("functionary_v3_2", (">>>all",)),
    ("seed_oss", ("<seed:tool_call>",)),
    ("minimax_m2", ("<minimax:tool_call>",)),
    ("glm", ("<arg_key>", "<arg_value>")),
    ("hunyuan", (":opensource", "tool_sep")),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("functionary_v3_1", ("<function=", "<|python_tag|>")),
    ("minicpm", ('<function name="', '<param name="')),
    ("nemotron_v2", ("<TOOLCALL>",)),
    ("firefunction", ("functools[",)),
    ("apertus", ("<|tools_prefix|>",)),
    ("gigachat", ("<|function_call|>",)),
    ("gigachat3", ("function call", "<|role_sep|>")),
    ("kimi_k3", ("open_tag('call'", "open_tag('argument'")),
    ("solar", ("<|tool_call:begin|>",)),
    ("apriel", ("<tool_calls>[",)),
    ("minimax_m1", ("<tool_calls>\\n",)),  # the backslash and n of the template's string literal
    ("gemma4", ("<|tool_call>call:",)),
    ("lfm2", ("<|tool_call_start|>",)),
    ("lfm2", ("<|tool_list_start|>",)),
    ("hermes", ("<tool_call>",)),
    ("llama3", ("ipython", '"parameters"')),
    # LFM2.5's instruct template lists the tools and leaves the calls to the content
    ("lfm2", ("List of tools: [",)),
)

# Families whose markup would pass for a signature above but that no format here writes: MiniMax
# M3 wraps Hermes-like tags in its own delimiters. Such a template gets None, not a wrong format.
UNSUPPORTED = ("]<]minimax[>[",)


def detect_format(template_source: str) -> str | None:
    """The name of the format (a key of ``worker.formats.FORMATS``) whose markup this template
    source writes, or None when no known signature is in it."""
    if not isinstance(template_source, str) or any(mark in template_source for mark in UNSUPPORTED):
        return None
    for name, needles in SIGNATURES:
        if all(n in template_source for n in needles):
            return name
    return None
