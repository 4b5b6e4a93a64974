"""Which host names a gateway serves (gateway/browser_guard.py): parsing a Host header, and the
default list of an open gateway."""

from __future__ import annotations

import pytest

from gateway.browser_guard import host_name, served_hosts
from gateway.settings import GatewaySettings


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8000", "localhost"),
        ("localhost.:8000", "localhost"),
        ("127.0.0.1:8000", "127.0.0.1"),
        ("[::1]:8000", "[::1]"),
        ("[::1]", "[::1]"),
        ("::1", "[::1]"),  # as a setting may name it
        ("toolq.lan", "toolq.lan"),
        ("", ""),
    ],
)
def test_host_name_drops_the_port_and_case(header, name):
    assert host_name(header) == name


def test_an_open_gateway_serves_localhost_its_bound_host_and_the_named_ones():
    assert served_hosts(GatewaySettings()) == {"localhost", "127.0.0.1", "[::1]"}
    assert served_hosts(GatewaySettings(host="192.168.1.5", allowed_hosts=["Toolq.LAN"])) == {
        "localhost",
        "127.0.0.1",
        "[::1]",
        "192.168.1.5",
        "toolq.lan",
    }
    assert served_hosts(GatewaySettings(host="0.0.0.0")) == {"localhost", "127.0.0.1", "[::1]"}  # no name for it
    assert served_hosts(GatewaySettings(allowed_hosts=["*"])) is None  # the operator turned it off


def test_with_api_keys_the_host_is_checked_only_when_named():
    keyed = {"api_keys": {"k": "t"}}
    assert served_hosts(GatewaySettings(**keyed)) is None
    assert served_hosts(GatewaySettings(**keyed, allowed_hosts=["gw.example"])) == {
        "localhost",
        "127.0.0.1",
        "[::1]",
        "gw.example",
    }
