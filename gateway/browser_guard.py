"""Keeps web pages in a user's browser from driving an open gateway (no API keys configured).

An open gateway trusts whoever reaches its port, so a page the user visits must not reach it:
- **DNS rebinding**: a page whose own name is rebound to 127.0.0.1 would be same-origin with the
  gateway and read its answers. Only the gateway's own host names are served (the ``Host``
  header): localhost, 127.0.0.1, [::1], the bound host and ``TOOLQ_ALLOWED_HOSTS``; any other
  gets 421 naming the host. The probes (/healthz, /readyz) show nothing and answer any name, so
  an orchestrator may probe a pod by its address.
- **Cross-site posts**: a page may post a form (urlencoded, multipart or text/plain) to any
  address without asking. A POST, PUT or PATCH with a body must be JSON (415 otherwise), which a
  form cannot send and a script may send cross-site only after a CORS preflight the gateway never
  grants; and a state-changing request (POST, PUT, PATCH, DELETE) whose ``Origin`` is not the
  gateway's own gets 403. The one exception is an upload to ``/v1/files`` (OpenAI's Files API is
  multipart): a form can post it cross-site, but a browser names its origin when it does, and a
  file alone starts nothing (a batch is created by a JSON POST).

With API keys a page has no key to send (the dashboard's cookie is ``SameSite=Strict``,
gateway/ui/session.py), so only the Host check stays, and only when ``TOOLQ_ALLOWED_HOSTS`` is set.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import send_error
from gateway.settings import GatewaySettings
from toolq.errors import Forbidden, MisdirectedRequest, ToolqError, UnsupportedMediaType

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "[::1]")
ANY_HOST = "*"
_WILDCARDS = ("0.0.0.0", "::", "[::]")  # a bound address no client names
_CHANGING = ("POST", "PUT", "PATCH", "DELETE")
_WITH_BODY = ("POST", "PUT", "PATCH")
PROBES = ("/healthz", "/readyz")  # gateway/health.py


def host_name(value: str) -> str:
    """A Host header (or a setting's entry) without its port, lower case, IPv6 in brackets:
    ``LocalHost:8000`` -> ``localhost``, ``[::1]:8000`` and ``::1`` -> ``[::1]``."""
    text = value.strip().lower()
    if text.startswith("["):
        return text[: text.find("]") + 1] if "]" in text else text
    if text.count(":") > 1:  # a bare IPv6 address, as a setting may name it
        return f"[{text}]"
    return text.partition(":")[0].rstrip(".")


def served_hosts(settings: GatewaySettings) -> frozenset[str] | None:
    """The host names the gateway answers; None: every name (no Host check)."""
    if ANY_HOST in settings.allowed_hosts or (not settings.open_access and not settings.allowed_hosts):
        return None
    names = {*DEFAULT_HOSTS, *(host_name(h) for h in settings.allowed_hosts)}
    if settings.bind_host() not in _WILDCARDS:
        names.add(host_name(settings.bind_host()))
    return frozenset(names)


FILES_PATH = "/v1/files"  # OpenAI's Files API takes its uploads as multipart forms (gateway/openai/files.py)


def _json(content_type: str) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class BrowserGuard:
    """Pure ASGI middleware: the checks above, before anything reads the body."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None, open_access: bool):
        self.app = app
        self.hosts = hosts
        self.open_access = open_access

    def refusal(self, scope: Scope) -> ToolqError | None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        host = headers.get("host", "")
        probe = scope["method"] in ("GET", "HEAD") and scope["path"] in PROBES
        if self.hosts is not None and host_name(host) not in self.hosts and not probe:
            named = f"host {host_name(host)!r}" if host else "a request with no Host header"
            return MisdirectedRequest(
                f"this gateway does not serve {named}; it serves {', '.join(sorted(self.hosts))} "
                "(add a name with TOOLQ_ALLOWED_HOSTS)",
                field="Host",
            )
        method = scope["method"]
        if not self.open_access or method not in _CHANGING:
            return None
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return Forbidden(
                f"a {method} from origin {origin!r} is refused: an open gateway takes state-changing "
                "requests only from its own pages or from clients that send no Origin",
                field="Origin",
            )
        if method in _WITH_BODY:
            content_type = headers.get("content-type")
            has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
            upload = scope["path"] == FILES_PATH and (content_type or "").lower().startswith("multipart/form-data")
            if (content_type is not None and not _json(content_type) and not upload) or (
                content_type is None and has_body
            ):
                said = f"is {content_type!r}" if content_type is not None else "is missing"
                return UnsupportedMediaType(
                    f"the body's Content-Type {said}; this gateway takes application/json only",
                    field="Content-Type",
                )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.refusal(scope)
            if refused is not None:
                await send_error(send, refused, scope, close=True)
                return
        await self.app(scope, receive, send)
