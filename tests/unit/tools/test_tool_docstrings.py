"""Descriptions from Google-style docstrings (toolq/tools/docstrings.py), beyond what the registry
tests in test_tools.py pin through specs."""

from __future__ import annotations

from toolq.tools import ToolRegistry
from toolq.tools.docstrings import ToolDoc, parse_docstring


def test_summary_is_the_first_paragraph_in_one_line():
    assert parse_docstring("Adds\ntwo numbers.\n\nMore.") == ToolDoc(summary="Adds two numbers.")
    assert parse_docstring("") == ToolDoc()


def test_a_section_header_ends_the_summary():
    doc = parse_docstring("Reads a level.\nNotes:\n    Slow.\nArgs:\n    place: Where.\n")
    assert doc == ToolDoc(summary="Reads a level.", arguments={"place": "Where."})


def test_only_the_args_section_describes_arguments():
    doc = parse_docstring("S.\n\nAttributes:\n    x: not an argument\n\nArgs:\n    y (int): Why,\n        because.\n")
    assert doc.arguments == {"y": "Why, because."}


def test_a_malformed_section_keeps_the_summary_and_the_registration():
    text = "Does it.\n\nArgs:\n    a: The a.\n\nRaises:\n    something bad, said without a colon\n"
    assert parse_docstring(text) == ToolDoc(summary="Does it.")

    reg = ToolRegistry()

    def does(a: int) -> int:
        return a

    does.__doc__ = text
    reg.tool(does)
    assert reg.specs()[0]["function"]["description"] == "Does it."
