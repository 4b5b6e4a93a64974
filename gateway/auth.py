"""API keys -> tenants.

Keys are kept only as sha256 digests, so a memory dump or a debug print of the settings object
held here shows no usable key. A key is accepted as ``Authorization: Bearer <key>`` or
``X-API-Key: <key>`` (the header KEDA's metrics-api scaler sends). Wrong keys are rate limited
per client address (gateway/wrong_keys.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from gateway.key_digest import key_digest
from gateway.settings import OPEN_TENANT
from gateway.state import State
from toolq.errors import Unauthorized

# auto_error=False: the dependency below decides, so "no key" and "wrong key" get our 401 body.
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key")


class KeyRing:
    def __init__(self, keys: dict[str, str], operators: Iterable[str] = ()):
        self._tenants = {key_digest(k): t for k, t in keys.items()}
        # the dashboard's operator keys (gateway/ui/access.py): every tenant's jobs, there only
        self._operators = frozenset(key_digest(k) for k in operators)

    @property
    def open(self) -> bool:
        return not self._tenants

    def tenant_of_key(self, key: str) -> str | None:
        """The tenant of an API key; None when no API key is this one."""
        return self._tenants.get(key_digest(key))

    def tenant_of_digest(self, digest: str) -> str | None:
        """The tenant of the key with this digest; None when no API key has it."""
        return self._tenants.get(digest)

    def is_operator(self, digest: str) -> bool:
        return digest in self._operators


def presented_key(request: Request) -> str | None:
    """The key a request carries (``Authorization: Bearer`` or ``X-API-Key``), if any."""
    auth = request.headers.get("authorization", "")
    scheme, _, credentials = auth.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.headers.get("x-api-key") or None


def invalid_key() -> Unauthorized:
    return Unauthorized("the API key is not valid", headers={"WWW-Authenticate": "Bearer"})


async def current_tenant(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header_key: Annotated[str | None, Depends(_header)],
    state: State,
) -> str:
    """The caller's tenant; raises Unauthorized, or TooManyWrongKeys (gateway/wrong_keys.py).
    Open access: every caller is one tenant."""
    ring: KeyRing = request.app.state.keyring
    if ring.open:
        return OPEN_TENANT
    key = bearer.credentials if bearer else header_key
    if not key:
        raise Unauthorized(
            "an API key is required (Authorization: Bearer <key> or X-API-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tenant = await state.wrong_keys.judge(request, key, lambda: ring.tenant_of_key(key))
    if tenant is None:
        raise invalid_key()
    return tenant


Tenant = Annotated[str, Depends(current_tenant)]  # a route parameter: the caller's tenant
