"""The sender's Prometheus metrics (no job, tenant or delivery ids as labels)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

ATTEMPTS = Counter("toolq_webhook_attempts_total", "Delivery attempts, by what followed", ["result"])
FINISHED = Counter("toolq_webhook_deliveries_total", "Deliveries that ended, delivered or failed", ["outcome"])
ATTEMPT_SECONDS = Histogram("toolq_webhook_attempt_seconds", "Time of one attempt, address check to answer")
IN_FLIGHT = Gauge("toolq_webhook_in_flight", "Attempts running now in this sender")
BACKLOG = Gauge("toolq_webhook_backlog", "Deliveries waiting (due, retrying or being sent), every sender's")


def serve_metrics(port: int) -> None:
    start_http_server(port)
