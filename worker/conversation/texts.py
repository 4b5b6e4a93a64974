"""Every text the loop writes for the model to read, in one place.

What is wrong with one call's arguments is said by ``toolq/tools/messages.py`` (the same texts a
tool service's checks give); here is how the loop frames them, and what it says of calls it does
not run: repeated, refused, interrupted, cut off.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toolq.tools.messages import unknown_tool as unknown_tool_text

__all__ = [
    "already_called",
    "cut_off",
    "interrupted",
    "invalid_arguments",
    "refused",
    "unknown_tool",
    "unreadable_calls",
]


def unknown_tool(name: str, names: Iterable[str]) -> str:
    return unknown_tool_text(name, sorted(names))


def invalid_arguments(name: str, errors: Sequence[str]) -> str:
    return f"invalid arguments for {name}: " + "; ".join(errors) + ". Call the tool again with corrected arguments."


def already_called(name: str, result: str) -> str:
    return (
        f"You already called {name} with these arguments; the result was: {result}. "
        "Use that result instead of calling again."
    )


def unreadable_calls(problems: Sequence[str], trigger: str | None) -> str:
    # name the format's own opening mark: a Mistral or Llama model has never seen <tool_call>
    mark = f" after {trigger}" if trigger else ""
    return (
        "Your tool call could not be used: "
        + "; ".join(problems)
        + f". Write the call again{mark} with valid arguments, or answer without a tool."
    )


def cut_off(max_tokens: int) -> str:
    return (
        f"your output was cut off after {max_tokens} tokens in the middle of a "
        "tool call, so that call was not executed; call it again with shorter arguments"
    )


def refused(name: str, reason: str | None) -> str:
    text = f"The call to {name} was refused by the user" + (f": {reason}" if reason else ".")
    return text + " Do not call it again with these arguments; continue without it or ask the user."


def interrupted(name: str) -> str:
    return (
        f"The call to {name} was interrupted before its result was recorded (the worker running "
        "it stopped), so it may or may not have taken effect. Check before relying on it, and call "
        "it again only if doing it twice is safe."
    )
