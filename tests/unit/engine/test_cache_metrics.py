"""The saved-state tiers' figures (EngineStats.cache) become the worker's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY

from worker.generation import EngineStats
from worker.metrics import EngineWatch


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_hits_misses_bytes_and_timings_reach_the_metrics():
    hits0 = value("toolq_worker_kv_cache_hits_total", tier="disk")
    misses0 = value("toolq_worker_kv_cache_misses_total", tier="host")
    restores0 = value("toolq_worker_kv_restore_seconds_count", tier="disk")
    copies0 = value("toolq_worker_kv_save_seconds_count", stage="copy")
    stats = EngineStats(slots=2)
    watch = EngineWatch()
    watch.update(stats, 1.0)
    stats.cache.hits["disk"] = 2
    stats.cache.misses["host"] = 2
    stats.cache.bytes.update(host=1000, disk=5000)
    stats.cache.timings.extend([("restore", "disk", 0.02), ("save", "copy", 0.03)])
    watch.update(stats, 2.0)
    stats.cache.hits["disk"] = 3
    watch.update(stats, 3.0)
    assert value("toolq_worker_kv_cache_hits_total", tier="disk") - hits0 == 3  # counted once each
    assert value("toolq_worker_kv_cache_misses_total", tier="host") - misses0 == 2
    assert value("toolq_worker_kv_cache_bytes", tier="disk") == 5000
    assert value("toolq_worker_kv_restore_seconds_count", tier="disk") - restores0 == 1
    assert value("toolq_worker_kv_save_seconds_count", stage="copy") - copies0 == 1
    assert not stats.cache.timings  # drained
