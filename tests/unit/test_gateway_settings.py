"""The gateway's fleet cache setting (gateway/settings.py), under its environment name."""

from gateway.settings import GatewaySettings


def test_the_fleet_cache_defaults_to_half_a_second():
    assert GatewaySettings().fleet_cache_s == 0.5
    assert GatewaySettings(fleet_cache_s=0).fleet_cache_s == 0


def test_the_fleet_cache_reads_its_environment_name(monkeypatch):
    monkeypatch.setenv("TOOLQ_FLEET_CACHE_S", "2")
    assert GatewaySettings().fleet_cache_s == 2
