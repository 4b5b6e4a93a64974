"""What only the gateway serves (threads, webhook deliveries): the SDK's methods for it call the
HTTP transport, and a Redis-mode client says so in one clear error."""

from __future__ import annotations

from typing import Any

from toolq.client.http_transport import HttpTransport
from toolq.client.transport import Transport
from toolq.errors import InvalidRequest


class GatewayCalls:
    transport: Transport  # Client's

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        if not isinstance(self.transport, HttpTransport):
            raise InvalidRequest(f"{path} is served by the gateway: use a Client with a url, not redis_url")
        return await self.transport._call(method, path, **kw)
