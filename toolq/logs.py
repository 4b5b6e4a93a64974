"""structlog JSON lines on stderr, the same for every toolq service.

Context (job_id, iteration, tool, tenant) comes from bound contextvars, so a log line carries it
without every call site passing it; with tracing on, so do the current span's trace_id and span_id
(toolq/tracing/log_ids.py).
"""

from __future__ import annotations

import logging
import sys

import structlog

from toolq.tracing.log_ids import add_trace_ids


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
