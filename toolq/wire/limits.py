"""The sizes the protocol allows: how much one request, one tool definition or one answer to a
paused job may carry. The wire contract (``toolq/wire/protocol.py``) and the API bodies
(``toolq/wire/api.py``) enforce them; the gateway's operator caps (``gateway/limits.py``) come on top."""

from __future__ import annotations

MAX_TOOLS = 128  # tools in one request, as OpenAI allows
MAX_STOP = 4  # stop sequences in one request, as OpenAI allows
MAX_DESCRIPTION = 4096  # characters of a tool's description
MAX_SCHEMA_BYTES = 32 * 1024  # a tool's parameters (or a response format's schema), as compact JSON

# What a caller may post to a paused job: results are untrusted text (the worker tokenizes them as
# plain text), bounded in size; one post answers at most this many calls.
MAX_TOOL_RESULT_BYTES = 256 * 1024
MAX_ANSWERS = MAX_TOOLS
MAX_REASON_CHARS = 4096
