"""An MCP tool result as the text the model reads.

The text blocks, joined; ``structuredContent`` as compact JSON only when there is no text. The
spec asks a server that returns structured content to send the same as serialized JSON in a text
block too, and FastMCP does (a tool returning ``22`` sends the text ``22`` and the structure
``{"result": 22}``), so the text is what the model would expect. Blocks the model cannot read
(images, audio, binary resources) are named, not inlined.
"""

from __future__ import annotations

import json

from mcp import types

__all__ = ["MAX_RESULT_CHARS", "result_text"]

MAX_RESULT_CHARS = 64 * 1024  # a result is untrusted text from another process; the context is finite


def result_text(result: types.CallToolResult) -> str:
    parts: list[str] = []
    texts = 0
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
            texts += 1
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(res.text)
                texts += 1
            else:
                parts.append(f"[resource {res.uri} ({res.mimeType or 'binary'})]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            parts.append(f"[{block.type} ({block.mimeType})]")
    if not texts and result.structuredContent is not None:
        parts.insert(0, json.dumps(result.structuredContent, ensure_ascii=False, separators=(",", ":")))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = f"{text[:MAX_RESULT_CHARS]}\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"
    return text
