"""toolq: tool-calling LLM conversations as queued jobs. The SDK is ``Client`` / ``SyncClient``."""

from toolq.client import Client, SyncClient

__all__ = ["Client", "SyncClient"]
