"""The sender's `toolq` subcommands: `toolq webhooks` runs the sender; `toolq webhooks failed` lists
a tenant's dead-letter list and `toolq webhooks redeliver ID` sends one again (straight in Redis:
operator tools; callers use the gateway's /v1/webhooks endpoints).

`toolq` finds `register` through the `toolq.commands` entry point (pyproject.toml); each handler
imports what it runs when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from toolq.errors import CommandError


def register(subparsers: Any) -> None:
    w = subparsers.add_parser("webhooks", help="run the webhook sender, or list and resend failed deliveries")
    w.add_argument("--redis", help="Redis URL (default TOOLQ_REDIS_URL)")
    w.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    w.add_argument("--concurrency", type=int, help="attempts in flight at once (default 16)")
    w.set_defaults(func=cmd_run)
    sub = w.add_subparsers(dest="webhooks_command")
    f = sub.add_parser("failed", help="list a tenant's failed deliveries (the dead-letter list), newest first")
    f.add_argument("--tenant", default="default")
    f.add_argument("--limit", type=int, default=50)
    f.set_defaults(func=cmd_failed)
    r = sub.add_parser("redeliver", help="send a failed delivery again (same webhook-id)")
    r.add_argument("delivery_id")
    r.add_argument("--tenant", default="default")
    r.set_defaults(func=cmd_redeliver)


def cmd_run(args: argparse.Namespace) -> int:
    from webhooks.main import run_sender

    return run_sender({"redis_url": args.redis, "metrics_port": args.metrics_port, "concurrency": args.concurrency})


def _deliveries_call(args: argparse.Namespace, call: Any) -> Any:
    from store import redis_urls
    from store.arq_link import connect
    from store.deliveries import Deliveries
    from store.errors import RedisError
    from toolq.settings import RedisSettings

    url = args.redis or RedisSettings().redis_url

    async def go() -> Any:
        redis = connect(url, socket_connect_timeout=5)
        try:
            return await call(Deliveries(redis))
        finally:
            await redis.aclose()

    try:
        redis_urls.check(url)
        return asyncio.run(go())
    except redis_urls.BadRedisURL as e:
        raise CommandError(str(e)) from None
    except ValueError as e:
        raise CommandError(f"bad Redis URL {url!r}: {e}") from None
    except (RedisError, OSError) as e:
        raise CommandError(f"cannot reach Redis at {url}: {e}") from None


def cmd_failed(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CommandError("--limit must be at least 1")
    for d in _deliveries_call(args, lambda ds: ds.failed(args.tenant, args.limit)):
        print(d.model_dump_json(exclude={"event", "history"}))
    return 0


def cmd_redeliver(args: argparse.Namespace) -> int:
    from store.deliveries import DeliveryNotFound, NotFailed

    try:
        d = _deliveries_call(args, lambda ds: ds.redeliver(args.delivery_id, args.tenant))
    except DeliveryNotFound:
        raise CommandError(f"no delivery {args.delivery_id!r} for tenant {args.tenant!r}") from None
    except NotFailed:
        raise CommandError(f"delivery {args.delivery_id!r} has not failed (it is pending or delivered)") from None
    print(d.model_dump_json(exclude={"event", "history"}), file=sys.stdout)
    return 0
