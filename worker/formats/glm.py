"""GLM 4.5 to 4.7 (also poolside Laguna, Ling, Spark): the name after ``<tool_call>``, then key/value pairs.

``<tool_call>NAME\\n<arg_key>ARG</arg_key>\\n<arg_value>VALUE</arg_value>\\n</tool_call>``
"""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat


class GlmFormat(XmlCallFormat):
    name = "glm"
    trigger = "<tool_call>"
    call_head = re.compile(r"<tool_call>\s*(?P<name>[^\s<]+)")
    param_head = re.compile(r"<arg_key>(?P<key>[^<]*)</arg_key>\s*<arg_value>")
    value_end = "</arg_value>"
    call_end = "</tool_call>"
    call_open = "<tool_call>{name}\n"
    param_open = "<arg_key>{key}</arg_key>\n<arg_value>"
    param_close = "</arg_value>\n"
    call_close = "</tool_call>"


FORMAT = GlmFormat()
