"""Where a webhook may be sent: a URL's host resolved, and every address it resolves to checked.

A webhook URL comes from a caller, so it could aim the sender at the operator's own network
(server-side request forgery): loopback, link-local (169.254.169.254, the cloud metadata service)
or private addresses are refused unless the operator allows them (``TOOLQ_WEBHOOK_ALLOW_PRIVATE``).
The check is on the resolved addresses, not the name, so a name that resolves to a private
address is refused too. The gateway checks at submission (a 422 that says why) and the sender
again at delivery time, and the sender then connects to the address it checked
(``CheckedUrl.pinned_url``), so a DNS answer that changes in between (rebinding) cannot move it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

# (host, port) -> the addresses it resolves to. Replaceable in tests.
Resolver = Callable[[str, int], Awaitable[list[str]]]

ALLOW_SETTING = "TOOLQ_WEBHOOK_ALLOW_PRIVATE"


class WebhookUrlRefused(ValueError):
    """The URL may not be delivered to (a policy answer: retrying does not help)."""


class WebhookHostUnresolved(ValueError):
    """The URL's host does not resolve now (it may later)."""


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # An IPv6 link-local answer may carry a zone ("fe80::1%eth0"): the address is before the '%'.
    return [str(info[4][0]).split("%", 1)[0] for info in infos]


# IPv6 forms that carry an IPv4 address a host may route to (RFC 6052 NAT64, RFC 3056 6to4):
# judged by the IPv4 address inside, so 64:ff9b::10.0.0.1 is as private as 10.0.0.1.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# RFC 8215's local-use NAT64 prefix: its translator is the operator's own, whatever IPv4 it carries.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def _why_plain(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_unspecified:
        return "the unspecified address (a connection to it reaches this host)"
    if ip.is_link_local:
        return "a link-local address (the range of cloud metadata services)"
    if ip.is_private:
        return "a private address"
    if not ip.is_global or ip.is_multicast:
        return "not a public unicast address"
    return None


def _carried(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 form carries, with the form's name; None for a plain IPv6 one."""
    if ip.ipv4_mapped is not None:
        return "an IPv4-mapped address", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "a 6to4 address", ip.sixtofour
    if ip in _NAT64:
        return "a NAT64 address", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d, but not :: and ::1
        return "an IPv4-compatible address", ipaddress.IPv4Address(int(ip))
    return None


def why_refused(address: str) -> str | None:
    """Why an address is not a public one (None when it is)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        carried = _carried(ip)
        if carried is not None:
            form, v4 = carried
            reason = _why_plain(v4)
            if reason is not None:
                return f"{form} carrying {v4}, {reason}"
            if form == "an IPv4-compatible address":  # deprecated (RFC 4291 2.5.5.1): no route should use it
                return f"{form} (deprecated) carrying {v4}"
            return None  # judged by the public IPv4 address it carries
        if ip in _LOCAL_NAT64:
            return "a local-use NAT64 address (64:ff9b:1::/48, the operator's own translator)"
        if ip.is_site_local:
            return "a site-local address (fec0::/10, a deprecated private range)"
    return _why_plain(ip)


@dataclass(frozen=True)
class CheckedUrl:
    url: str  # as given
    scheme: str
    host_header: str  # the URL's host[:port], sent as Host (and the TLS name)
    hostname: str
    port: int
    target: str  # path and query
    address: str  # the address that was checked: the one to connect to

    @property
    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address (connect there, nowhere else)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}{self.target}"


async def _addresses(host: str, port: int, resolver: Resolver, timeout_s: float) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass  # a name
    try:
        addresses = await asyncio.wait_for(resolver(host, port), timeout_s)
    except (OSError, UnicodeError, asyncio.TimeoutError) as e:
        raise WebhookHostUnresolved(f"webhook host {host!r} does not resolve: {e or type(e).__name__}") from None
    if not addresses:
        raise WebhookHostUnresolved(f"webhook host {host!r} resolves to no address")
    return addresses


async def check_url(
    url: str, *, allow_private: bool, resolver: Resolver | None = None, timeout_s: float = 5.0
) -> CheckedUrl:
    """Resolve a webhook URL's host and check every address. Raises WebhookUrlRefused (with the
    reason) or WebhookHostUnresolved."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise WebhookUrlRefused(f"webhook URL {url!r} is not http(s)://host/...")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookUrlRefused(f"webhook URL {url!r} has a port that is not a number in 1..65535") from None
    addresses = await _addresses(host, port, resolver or system_resolver, timeout_s)
    if not allow_private:
        for address in addresses:
            reason = why_refused(address)
            if reason is not None:
                named = " is" if address == host else f" resolves to {address}, which is"
                raise WebhookUrlRefused(
                    f"webhook URL {url!r}: host {host!r}{named} {reason}; webhooks are not sent to loopback, "
                    f"link-local or private addresses unless the operator allows them ({ALLOW_SETTING})"
                )
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return CheckedUrl(
        url=url,
        scheme=parts.scheme,
        host_header=parts.netloc,
        hostname=host,
        port=port,
        target=target,
        address=addresses[0],
    )
