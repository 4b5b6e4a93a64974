"""The gateway's `toolq` subcommand: `toolq gateway`.

`toolq` finds `register` through the `toolq.commands` entry point (pyproject.toml). Registering
only adds the argparse subcommand; FastAPI and uvicorn are imported when the gateway runs.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    g = subparsers.add_parser("gateway", help="run the HTTP gateway")
    g.add_argument("--host")
    g.add_argument("--port", type=int)
    g.add_argument("--redis")
    g.set_defaults(func=cmd_gateway)


def cmd_gateway(args: argparse.Namespace) -> int:
    from gateway.main import run_gateway

    return run_gateway(host=args.host, port=args.port, redis_url=args.redis)
