"""`toolq tools serve MODULE [MODULE ...]`: serve every ``@tool`` function of the modules as a
tool service. Part of the public package (it is the SDK's own command), so it is built into
`toolq` rather than plugged in through an entry point; it imports the services only when run."""

from __future__ import annotations

import argparse
from typing import Any

from toolq.errors import CommandError


def register(subparsers: Any) -> None:
    t = subparsers.add_parser("tools", help="tool services: serve @tool functions to every worker over Redis")
    tsub = t.add_subparsers(dest="tools_command", required=True)
    s = tsub.add_parser("serve", help="serve every @tool function of the modules, and the tools of MCP servers")
    s.add_argument("modules", nargs="*", metavar="MODULE", help="importable module with @tool functions")
    s.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="JSON",
        help='an MCP server whose tools to serve too: {"name": ..., "command": [...]} or {"name": ..., "url": ...}',
    )
    s.add_argument("--redis-url", help="Redis URL (default TOOLQ_REDIS_URL)")
    s.add_argument("--concurrency", type=int, default=16, help="calls this instance runs at once (default 16)")
    s.add_argument(
        "--lease-ms",
        type=int,
        default=3000,
        help="a call an instance holds this long without renewing is claimed by another (default 3000)",
    )
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:  # the tool package and the store: the light client (pyproject.toml) has neither
        from store import redis_urls
        from toolq.logs import configure_logging
        from toolq.services.service import serve
        from toolq.settings import RedisSettings
        from toolq.tools import ToolLoadError, ToolRegistry, load_tool_modules
    except ImportError as e:
        raise CommandError(f"tools serve needs the tools extra ({e}): pip install 'toolq[tools]'") from None

    if args.concurrency < 1:
        raise CommandError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.lease_ms < 100:
        raise CommandError(f"--lease-ms must be at least 100, got {args.lease_ms}")
    url = args.redis_url or RedisSettings().redis_url
    try:
        redis_urls.check(url)  # Sentinel URLs included
    except redis_urls.BadRedisURL as e:
        raise CommandError(str(e)) from None
    if not args.modules and not args.mcp:
        raise CommandError("name at least one MODULE with @tool functions, or an MCP server with --mcp")
    try:
        registry = load_tool_modules(args.modules) if args.modules else ToolRegistry()
    except ToolLoadError as e:
        raise CommandError(str(e)) from None
    if args.modules and not registry.names():
        raise CommandError(f"no @tool functions in {', '.join(args.modules)}")
    mcp = None
    if args.mcp:
        mcp = _mcp_tools(args.mcp, registry.names())
    configure_logging()
    from toolq.tracing import configure_tracing, shutdown_tracing

    configure_tracing("toolq-tools")
    try:
        serve(registry, redis_url=url, concurrency=args.concurrency, lease_ms=args.lease_ms, mcp=mcp)
    finally:
        shutdown_tracing()
    return 0


def _mcp_tools(entries: list[str], reserved: list[str]) -> Any:
    try:
        from toolq.mcp import McpTools, join_server_args, parse_servers
    except ImportError:
        raise CommandError("--mcp needs the MCP SDK: pip install 'toolq[mcp]'") from None
    try:
        return McpTools(parse_servers(join_server_args(entries)), reserved=reserved)
    except ValueError as e:
        raise CommandError(str(e)) from None
