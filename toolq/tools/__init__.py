"""The tool registry: ``@tool``, JSON schema from type hints, validation, execution with timeout.

A tool is a plain Python function, sync or async. Registering it builds a pydantic model from its
signature; that model gives the JSON schema shown to the model (OpenAI function shape) and does the
validation of the arguments the model wrote. Validation is strict (``"5"`` is not an integer, a
bool is not an integer) because silently coercing hides the model's mistakes; the error texts are
written for the model to read and correct itself.

Tool modules register on the module-level ``REGISTRY``::

    from toolq.tools import tool

    @tool
    def get_time(zone: str) -> str:
        \"\"\"Current time in a time zone.\"\"\"

The modules, one idea each: ``registry`` (names, specs, check and run), ``function`` (one registered
function), ``signature`` (its argument model and schema), ``docstrings`` (its descriptions),
``validation`` and ``messages`` (checking a call, and the texts the model reads), ``execution``,
``threads`` and ``results`` (running a call and what it produced), ``effects`` and ``journal``
(a call's effect key, ``current_call()``, and ``once`` for effects with no idempotency of their
own), ``errors``.
"""

from toolq.tools.effects import CallContext, NoCallError, current_call, effect_key
from toolq.tools.errors import ToolLoadError, ToolRegistrationError, UnknownToolError
from toolq.tools.function import Tool
from toolq.tools.registry import REGISTRY, ToolRegistry, load_tool_modules, tool
from toolq.tools.results import ToolOutcome
from toolq.tools.validation import CheckedCall

__all__ = [
    "REGISTRY",
    "CallContext",
    "CheckedCall",
    "NoCallError",
    "Tool",
    "ToolLoadError",
    "ToolOutcome",
    "ToolRegistrationError",
    "ToolRegistry",
    "UnknownToolError",
    "current_call",
    "effect_key",
    "load_tool_modules",
    "tool",
]
