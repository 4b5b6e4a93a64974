"""`toolq workers`: the live workers of every model, with their caches (store/affinity.py),
as the gateway's /v1/models shows them. Built into `toolq`, like `toolq threads`."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from toolq.commands.gateway_url import check_gateway_url
from toolq.errors import CommandError


def register(subparsers: Any) -> None:
    w = subparsers.add_parser("workers", help="the live workers and the conversations each holds")
    w.add_argument("--url", help="gateway URL (default TOOLQ_URL or http://127.0.0.1:8000)")
    w.add_argument("--api-key", help="API key (default TOOLQ_API_KEY)")
    w.add_argument("--json", action="store_true", help="print the models' caches and placements as JSON")
    w.set_defaults(func=cmd_workers)


async def _workers(args: argparse.Namespace) -> int:
    from toolq import errors
    from toolq.client import Client

    async with Client(args.url, args.api_key) as client:
        try:
            models = await client.models()
        except errors.ToolqError as e:
            raise CommandError(e.message) from None
    if args.json:
        out = [m.model_dump(mode="json", include={"id", "caches", "placements"}) for m in models]
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'model':<24} {'worker':<36} {'slots':>5} {'busy':>4} {'held':>5}  bytes per tier")
    for m in models:
        for c in m.caches:
            tiers = ", ".join(f"{t}={n}" for t, n in sorted(c.bytes.items())) or "-"
            print(f"{m.id:<24} {c.worker:<36} {c.slots:>5} {c.busy:>4} {c.conversations:>5}  {tiers}")
        placed = ", ".join(f"{k}={v}" for k, v in m.placements.items())
        print(f"{m.id:<24} placements: {placed or '-'}")
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    check_gateway_url(args.url)
    return asyncio.run(_workers(args))
