"""toolq: tool-calling LLM conversations as queued jobs. The SDK is ``Client`` / ``SyncClient``;
``tool`` and ``ToolService`` serve a process's own functions as tools to every worker;
``verify_webhook`` checks a webhook delivery's signature.

``import toolq`` loads the light client only (httpx, httpx-sse, pydantic: pyproject.toml).
``tool`` and ``ToolService`` stand on the tool package and the store, which need the ``tools``
extra (``pip install 'toolq[tools]'``), so they are imported when first asked for.
"""

import typing as _typing  # aliased: every public name of the package is in __all__

from toolq.client import Client, SyncClient
from toolq.webhooks.signing import WebhookVerificationError, verify_webhook

if _typing.TYPE_CHECKING:
    from toolq.services import ToolService
    from toolq.tools import tool

__all__ = ["Client", "SyncClient", "ToolService", "WebhookVerificationError", "tool", "verify_webhook"]

_LAZY = {"ToolService": "toolq.services", "tool": "toolq.tools"}


def __getattr__(name: str) -> _typing.Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'toolq' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
