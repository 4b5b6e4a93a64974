"""Gateway settings that were renamed keep their old spelling's meaning (gateway/settings.py)."""

from gateway.settings import GatewaySettings


def test_the_fleet_cache_takes_its_old_name_registry_cache_s():
    assert GatewaySettings(registry_cache_s=0).fleet_cache_s == 0
    assert GatewaySettings(registry_cache_s=3, fleet_cache_s=1).fleet_cache_s == 1  # the new name wins
    assert GatewaySettings().fleet_cache_s == 0.5


def test_the_fleet_cache_reads_its_environment_name(monkeypatch):
    monkeypatch.setenv("TOOLQ_FLEET_CACHE_S", "2")
    assert GatewaySettings().fleet_cache_s == 2
