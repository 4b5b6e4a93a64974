"""Loading a chat template from a file or from a GGUF's metadata."""

from __future__ import annotations

import pytest

from worker.templates import ChatTemplate, TemplateError


def test_from_file_and_missing_file(tmp_path):
    path = tmp_path / "t.j2"
    path.write_text("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}")
    t = ChatTemplate.from_file(path, bos_token="<s>", eos_token="</s>")
    assert t.render_raw([{"role": "user", "content": "x"}]) == "<s>x</s>"
    with pytest.raises(TemplateError, match="cannot read"):
        ChatTemplate.from_file(tmp_path / "nope.j2")


def test_from_gguf_metadata_prefers_the_tool_use_template():
    metadata = {
        "tokenizer.chat_template": "default {{ bos_token }}",
        "tokenizer.chat_template.tool_use": "tool_use {{ eos_token }}",
        "general.name": "x",
    }
    t = ChatTemplate.from_gguf_metadata(metadata, bos_token="<s>", eos_token="</s>")
    assert t.render_raw([]) == "tool_use </s>"
    t = ChatTemplate.from_gguf_metadata({"tokenizer.chat_template": "default {{ bos_token }}"}, "<s>", "</s>")
    assert t.render_raw([]) == "default <s>"
    with pytest.raises(TemplateError, match="no chat template"):
        ChatTemplate.from_gguf_metadata({"general.name": "x"})
