"""The sandbox: escapes and oversized values are stopped, errors name the template's line."""

from __future__ import annotations

import time

import pytest

from tests.unit.templates.conversations import HERMES, load
from toolq.wire.protocol import Message
from worker.templates import ChatTemplate, TemplateError, TemplateRaisedError, TemplateSyntaxError, UnsafeTemplateError


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__.os.system('touch /tmp/toolq-pwned') }}",
        "{{ lipsum.__globals__['os'] }}",
        "{{ self.__init__.__globals__ }}",
        "{{ messages[0].__class__ }}",
        "{{ '{0.__class__}'.format('') }}",
        "{% for m in messages %}{{ m.content.__len__() }}{% endfor %}",
    ],
)
def test_sandbox_escapes_fail_with_our_error(source, tmp_path):
    t = ChatTemplate(source, name="evil")
    with pytest.raises(UnsafeTemplateError, match="template tried to access an unsafe attribute"):
        t.render_raw([{"role": "user", "content": "hi"}])


def test_sandbox_escape_never_runs(tmp_path):
    target = tmp_path / "pwned"
    source = "{{ cycler.__init__.__globals__.os.system('touch " + str(target) + "') }}"
    with pytest.raises(TemplateError):
        ChatTemplate(source).render_raw([])
    assert not target.exists()


def test_templates_cannot_mutate_their_inputs():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(UnsafeTemplateError):
        ChatTemplate("{{ messages.append(1) }}").render_raw(messages)
    assert messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("source", ["{{ 'a' * 100000000 }}", "{{ [1] * (10 ** 8) }}", "{{ 2 ** 100000000 }}"])
def test_templates_cannot_build_huge_values(source):
    with pytest.raises(UnsafeTemplateError):
        ChatTemplate(source).render_raw([])


def test_raise_exception_gives_our_error_with_the_templates_message():
    t = load("mistral_instruct_v0_1")
    with pytest.raises(
        TemplateRaisedError, match=r"^Conversation roles must alternate user/assistant/user/assistant/...$"
    ):
        t.render_raw([{"role": "assistant", "content": "a"}])
    assert issubclass(TemplateRaisedError, TemplateError)


def test_syntax_error_names_the_line():
    source = "{% for m in messages %}\n{{ m.content }}\n{% if m.role %}\n{% endfor %}"
    with pytest.raises(TemplateSyntaxError) as info:
        ChatTemplate(source, name="broken.j2")
    message = str(info.value)
    assert "broken.j2" in message and "line 4" in message


def test_runtime_error_names_the_line():
    t = ChatTemplate("ok\n{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}", name="typed.j2")
    with pytest.raises(TemplateError, match=r"typed.j2 failed at line 3: TypeError"):
        t.render_raw([{"role": "user", "content": "x"}])


def test_render_passes_template_errors_through():
    # Rendering a conversation the adapted template still refuses is our error, not a crash.
    t = load("mistral_instruct_v0_1")
    with pytest.raises(TemplateRaisedError, match="alternate"):
        t.render([Message(role="assistant", content="first")], tools=[], fmt=HERMES)


def test_strftime_now_and_generation_tag():
    t = ChatTemplate("{% generation %}{{ strftime_now('%Y') }}{% endgeneration %}")
    assert t.render_raw([]) == time.strftime("%Y")
