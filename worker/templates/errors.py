"""The errors a chat template raises while loading or rendering."""

from __future__ import annotations


class TemplateError(Exception):
    """A chat template could not be loaded or rendered; str() says why, for a human."""


class TemplateSyntaxError(TemplateError):
    """The template source does not compile."""


class UnsafeTemplateError(TemplateError):
    """The template reached for something the sandbox forbids; it was stopped, not run."""


class TemplateRaisedError(TemplateError):
    """The template itself called ``raise_exception(message)``."""
