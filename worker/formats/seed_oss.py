"""ByteDance Seed-OSS: Qwen3-Coder's argument elements inside ``<seed:tool_call>``.

``<seed:tool_call>\\n<function=NAME>\\n<parameter=ARG>VALUE</parameter>\\n</function>\\n</seed:tool_call>``
"""

from __future__ import annotations

import re

from worker.formats.xmlcalls import XmlCallFormat


class SeedOssFormat(XmlCallFormat):
    name = "seed_oss"
    trigger = "<seed:tool_call>"
    call_head = re.compile(r"<function=(?P<name>[^>\n]+)>")
    param_head = re.compile(r"<parameter=(?P<key>[^>\n]+)>")
    value_end = "</parameter>"
    call_end = "</function>"
    call_open = "<seed:tool_call>\n<function={name}>\n"
    param_open = "<parameter={key}>"
    param_close = "</parameter>\n"
    call_close = "</function>\n</seed:tool_call>"
    noise = ("<seed:tool_call>", "</seed:tool_call>", "<seed:eos>")


FORMAT = SeedOssFormat()
