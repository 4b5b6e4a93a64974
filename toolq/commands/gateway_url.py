"""A gateway URL checked before a command connects: a URL that is not http(s)://host fails at
once with one line, not after the client's reconnect attempts."""

from __future__ import annotations

from toolq.errors import CommandError


def check_gateway_url(url: str | None) -> None:
    """A URL that is not http(s)://host fails here, not after the client's reconnect attempts."""
    import httpx

    from toolq.client import ClientSettings

    url = url or ClientSettings().url
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise CommandError(f"bad gateway URL {url!r}: {e}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CommandError(f"bad gateway URL {url!r}: expected http://host:port or https://host")
