"""MiniCPM 5: ``<function name="NAME"><param name="ARG">VALUE</param></function>``; string values are
written inside ``<![CDATA[...]]>`` when they hold ``<``, ``&`` or a newline."""

from __future__ import annotations

import re
from typing import Any

from worker.formats.xmlcalls import XmlCallFormat

_CDATA_OPEN, _CDATA_CLOSE = "<![CDATA[", "]]>"


class MinicpmFormat(XmlCallFormat):
    name = "minicpm"
    trigger = "<function name="
    call_head = re.compile(r'<function name="(?P<name>[^"]+)">')
    param_head = re.compile(r'<param name="(?P<key>[^"]+)">')
    value_end = "</param>"
    call_end = "</function>"
    call_open = '<function name="{name}">'
    param_open = '<param name="{key}">'
    param_close = "</param>"
    call_close = "</function>"

    def value(self, raw: str, m: re.Match[str]) -> Any:
        if raw.startswith(_CDATA_OPEN) and raw.endswith(_CDATA_CLOSE):
            return raw[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)]
        return super().value(raw, m)

    def _param(self, key: str, value: Any) -> str:
        if isinstance(value, str) and any(ch in value for ch in "<&\n"):
            # the template's own rule: such values go in a CDATA block
            return f'<param name="{key}">{_CDATA_OPEN}{value}{_CDATA_CLOSE}</param>'
        return super()._param(key, value)


FORMAT = MinicpmFormat()
