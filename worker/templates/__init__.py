"""Chat templates: loading, a Jinja sandbox, capability probing and role adaptation.

A chat template turns a conversation into the one prompt string a model was trained on. They
come from ``chat_templates/`` (maintained here) or from a GGUF's own metadata. One module per
part:

- ``errors``: what loading or rendering raises;
- ``sandbox``: the Jinja sandbox templates are compiled and run in;
- ``markers``: marking message text untrusted and finding it again in the rendered prompt;
- ``probe``: what a template can render (``Capabilities``), found by rendering samples;
- ``adapt``: a conversation rewritten into what the template can render;
- ``template``: ``ChatTemplate``, which ties these together, and ``RenderedPrompt``;
- ``bundled``: the folder of maintained templates.
"""

from worker.templates.bundled import TEMPLATES_DIR, available_templates
from worker.templates.errors import TemplateError, TemplateRaisedError, TemplateSyntaxError, UnsafeTemplateError
from worker.templates.probe import Capabilities
from worker.templates.template import ChatTemplate, RenderedPrompt

__all__ = [
    "TEMPLATES_DIR",
    "Capabilities",
    "ChatTemplate",
    "RenderedPrompt",
    "TemplateError",
    "TemplateRaisedError",
    "TemplateSyntaxError",
    "UnsafeTemplateError",
    "available_templates",
]
