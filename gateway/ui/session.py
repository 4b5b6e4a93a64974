"""Who is looking at the dashboard: the same API keys as the HTTP API, plus operator keys.

A browser cannot put a header on an ``EventSource``, and a key kept in page storage is readable by
any script on the page. So the key is typed once into ``POST /ui/login``, which answers with a
session cookie: ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page can
make the browser send it, which is what guards the dashboard's POSTs), ``Path=/ui``, ``Secure``
over HTTPS, expiring after ``ui_session_s``. The cookie holds the key's sha256 digest (never the
key) and its expiry, signed with HMAC-SHA256 under ``ui_secret``; each request looks the digest
up in the current keys again, so a key removed from the configuration ends its sessions at once.

Scripts may skip the cookie and send the key as the API does (``Authorization: Bearer`` or
``X-API-Key``); a wrong key, typed or sent, counts toward the address's limit
(gateway/wrong_keys.py). With no API keys configured the gateway is open (gateway/app.py warns at start),
and the dashboard is too: no sign-in, every tenant's jobs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Response

from gateway.auth import KeyRing, invalid_key, presented_key
from gateway.key_digest import key_digest
from gateway.settings import GatewaySettings
from gateway.state import get_state
from toolq.errors import Unauthorized

COOKIE = "toolq_ui"
COOKIE_PATH = "/ui"


@dataclass(frozen=True)
class Viewer:
    """A signed-in caller: a tenant, or an operator (``tenant`` None) who sees every tenant."""

    tenant: str | None
    open: bool = False  # no API keys configured: everyone is an operator

    @property
    def operator(self) -> bool:
        return self.tenant is None


class Sessions:
    """Signs and reads session cookies for one app (``app.state.ui_sessions``)."""

    def __init__(self, settings: GatewaySettings, ring: KeyRing):
        secret = settings.ui_secret.get_secret_value().encode() if settings.ui_secret else secrets.token_bytes(32)
        self._secret = secret
        self.ring = ring
        self.ttl_s = settings.ui_session_s

    def _sign(self, body: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(self._secret, body, hashlib.sha256).digest()).decode().rstrip("=")

    def token(self, digest: str) -> str:
        body = base64.urlsafe_b64encode(json.dumps({"d": digest, "x": int(time.time()) + self.ttl_s}).encode())
        text = body.decode().rstrip("=")
        return f"{text}.{self._sign(text.encode())}"

    def digest_of(self, token: str) -> str | None:
        """The key digest a valid, unexpired token carries; None for anything else."""
        text, sep, sig = token.partition(".")
        if not sep or len(token) > 512 or not hmac.compare_digest(sig, self._sign(text.encode())):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            digest, expires = str(data["d"]), int(data["x"])
        except (ValueError, KeyError, TypeError):
            return None
        return digest if expires > time.time() else None

    def viewer_of_digest(self, digest: str) -> Viewer | None:
        if self.ring.is_operator(digest):
            return Viewer(tenant=None)
        tenant = self.ring.tenant_of_digest(digest)
        return Viewer(tenant=tenant) if tenant is not None else None

    def viewer_of_key(self, key: str) -> Viewer | None:
        return self.viewer_of_digest(key_digest(key))

    def sign_in(self, response: Response, request: Request, key: str) -> Viewer:
        """Set the session cookie for a valid key; raises Unauthorized for any other."""
        viewer = self.viewer_of_key(key)
        if viewer is None:
            raise Unauthorized("the key is neither an API key nor an operator key", field="key")
        response.set_cookie(
            COOKIE,
            self.token(key_digest(key)),
            max_age=self.ttl_s,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return viewer

    @staticmethod
    def sign_out(response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )


async def current_viewer(request: Request) -> Viewer:
    """The caller, from the session cookie or an API key header; raises Unauthorized (401)."""
    sessions: Sessions = request.app.state.ui_sessions
    if sessions.ring.open:
        return Viewer(tenant=None, open=True)
    token = request.cookies.get(COOKIE)
    if token:
        digest = sessions.digest_of(token)
        viewer = sessions.viewer_of_digest(digest) if digest else None
        if viewer is not None:
            return viewer
    key = presented_key(request)
    if key:
        wrong_keys = (await get_state(request)).wrong_keys
        viewer = await wrong_keys.judge(request, key, lambda: sessions.viewer_of_key(key))
        if viewer is None:
            raise invalid_key()
        return viewer
    raise Unauthorized("sign in at /ui/login, or send an API key", headers={"WWW-Authenticate": "Bearer"})


ViewerDep = Annotated[Viewer, Depends(current_viewer)]  # a route parameter: who is looking
