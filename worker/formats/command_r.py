"""Cohere Command R / R+ (tool-use template): ``Action: ```json`` then a JSON array of
``{"tool_name", "parameters"}`` objects, then the closing fence."""

from __future__ import annotations

import re

from worker.formats.marked import MarkedJsonFormat


class CommandRFormat(MarkedJsonFormat):
    name = "command_r"
    trigger = "Action:"
    head = re.compile(r"Action:")
    named = False
    open = "Action: ```json\n"
    close = "\n```"
    name_key = "tool_name"
    args_key = "parameters"
    noise = ("<|END_OF_TURN_TOKEN|>",)


FORMAT = CommandRFormat()
