"""Where a webhook may go: every resolved address checked, private ones refused unless allowed,
and the connection pinned to the address that was checked."""

from __future__ import annotations

import ipaddress

import pytest

from toolq.webhooks.urls import WebhookHostUnresolved, WebhookUrlRefused, check_url, why_refused
from toolq.wire.protocol import JobRequest


def resolver_of(table: dict[str, list[str]]):
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return table[host]

    return resolve


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://127.8.9.10:8080/x", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.20/", "private"),
        ("http://172.16.5.5/", "private"),
        ("http://[fd00::1]/", "private"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://100.64.0.1/", "not a public"),  # carrier-grade NAT
        ("http://224.0.0.1/", "not a public"),
    ],
)
async def test_addresses_that_are_not_public_are_refused_with_the_reason(url, why):
    with pytest.raises(WebhookUrlRefused, match=why):
        await check_url(url, allow_private=False)
    assert (await check_url(url, allow_private=True)).address


async def test_a_name_is_judged_by_the_addresses_it_resolves_to():
    resolve = resolver_of(
        {
            "hooks.example.com": ["93.184.216.34"],
            "sneaky.example.com": ["10.0.0.7"],
            "mixed.example.com": ["93.184.216.34", "192.168.0.9"],  # any private answer refuses
        }
    )
    ok = await check_url("https://hooks.example.com/in?x=1", allow_private=False, resolver=resolve)
    assert ok.address == "93.184.216.34" and ok.pinned_url == "https://93.184.216.34:443/in?x=1"
    assert ok.host_header == "hooks.example.com" and ok.hostname == "hooks.example.com"
    with pytest.raises(WebhookUrlRefused, match=r"'sneaky.example.com' resolves to 10.0.0.7, which is a private"):
        await check_url("http://sneaky.example.com/", allow_private=False, resolver=resolve)
    with pytest.raises(WebhookUrlRefused, match=r"192\.168\.0\.9"):
        await check_url("http://mixed.example.com/", allow_private=False, resolver=resolve)
    allowed = await check_url("http://sneaky.example.com:8080/h", allow_private=True, resolver=resolve)
    assert allowed.pinned_url == "http://10.0.0.7:8080/h" and allowed.host_header == "sneaky.example.com:8080"
    with pytest.raises(WebhookHostUnresolved, match="does not resolve"):
        await check_url("http://nowhere.example.com/", allow_private=True, resolver=resolve)


async def test_numeric_spellings_of_loopback_are_caught_after_resolution():
    # 2130706433 is 127.0.0.1 as one number; the system resolver reads it so, and so is it judged.
    with pytest.raises(WebhookUrlRefused, match=r"resolves to 127\.0\.0\.1"):
        await check_url("http://2130706433/", allow_private=False)


async def test_an_ipv6_address_is_bracketed_in_the_pinned_url():
    checked = await check_url("http://[2606:4700::1111]:8443/p", allow_private=False)
    assert checked.pinned_url == "http://[2606:4700::1111]:8443/p"


def test_why_refused_passes_public_addresses():
    assert why_refused("93.184.216.34") is None and why_refused("2606:4700::1111") is None


@pytest.mark.parametrize(
    "bad",
    ["ftp://example.com/", "example.com/hook", "http:///nohost", "http://user:pw@example.com/", "http://e.com:99999/"],
)
def test_a_webhook_that_is_not_an_http_url_is_refused_by_the_protocol(bad):
    with pytest.raises(ValueError, match="webhook URL"):
        JobRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "webhook": bad})


def test_a_bare_url_names_every_event():
    req = JobRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "webhook": "https://e.com/h"})
    assert req.webhook is not None and req.webhook.events == ["completed", "failed", "cancelled", "requires_action"]
    with pytest.raises(ValueError):
        JobRequest.model_validate(
            {"messages": [{"role": "user", "content": "hi"}], "webhook": {"url": "https://e.com/", "events": ["done"]}}
        )


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("64:ff9b::a00:1", "a NAT64 address carrying 10.0.0.1, a private address"),
        ("64:ff9b::a9fe:a9fe", "a NAT64 address carrying 169.254.169.254, a link-local"),
        ("64:ff9b::7f00:1", "a NAT64 address carrying 127.0.0.1, a loopback"),
        ("64:ff9b:1::808:808", "local-use NAT64"),
        ("2002:a00:1::1", "a 6to4 address carrying 10.0.0.1, a private address"),
        ("2002:c0a8:0101::1", "a 6to4 address carrying 192.168.1.1, a private address"),
        ("2002:7f00:1::1", "a 6to4 address carrying 127.0.0.1, a loopback"),
        ("::10.0.0.1", "an IPv4-compatible address carrying 10.0.0.1, a private address"),
        ("::127.0.0.1", "an IPv4-compatible address carrying 127.0.0.1, a loopback"),
        ("::8.8.8.8", "IPv4-compatible address \\(deprecated\\)"),
        ("::ffff:10.0.0.1", "an IPv4-mapped address carrying 10.0.0.1, a private address"),
        ("fec0::1", "a site-local address"),
        ("feff:ffff::1", "a site-local address"),
    ],
)
async def test_ipv6_forms_that_carry_a_private_ipv4_and_site_local_ones_are_refused(address, why):
    assert why_refused(address) is not None
    with pytest.raises(WebhookUrlRefused, match=why):
        await check_url(f"http://[{address}]/hook", allow_private=False)
    resolve = resolver_of({"rebound.example.com": [address]})
    with pytest.raises(WebhookUrlRefused, match=f"resolves to {address}"):
        await check_url("http://rebound.example.com/", allow_private=False, resolver=resolve)
    allowed = await check_url(f"http://[{address}]/hook", allow_private=True)
    assert allowed.address == str(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "2001:4860::8888"])
def test_ipv6_forms_that_carry_a_public_ipv4_or_none_pass(address):
    # NAT64 and 6to4 are how an IPv6-only host reaches a public IPv4 receiver: judged by what they carry
    assert why_refused(address) is None
