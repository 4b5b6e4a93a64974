"""toolq: tool-calling LLM conversations as queued jobs. The SDK is ``Client`` / ``SyncClient``;
``tool`` and ``ToolService`` serve a process's own functions as tools to every worker."""

from toolq.client import Client, SyncClient
from toolq.services import ToolService
from toolq.tools import tool

__all__ = ["Client", "SyncClient", "ToolService", "tool"]
