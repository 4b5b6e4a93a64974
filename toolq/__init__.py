"""toolq: tool-calling LLM conversations as queued jobs. The SDK is ``Client`` / ``SyncClient``;
``tool`` and ``ToolService`` serve a process's own functions as tools to every worker;
``verify_webhook`` checks a webhook delivery's signature."""

from toolq.client import Client, SyncClient
from toolq.services import ToolService
from toolq.tools import tool
from toolq.webhooks import WebhookVerificationError, verify_webhook

__all__ = ["Client", "SyncClient", "ToolService", "WebhookVerificationError", "tool", "verify_webhook"]
