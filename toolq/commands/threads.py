"""`toolq threads create | list | show | run | delete`: threads on the gateway, from the shell.
Built into `toolq` (the SDK's own command, like `toolq tools`)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from toolq.commands.gateway_url import check_gateway_url
from toolq.errors import CommandError

STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")


def register(subparsers: Any) -> None:
    t = subparsers.add_parser("threads", help="conversations kept on the server, and runs on them")
    tsub = t.add_subparsers(dest="threads_command", required=True)

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--url", help="gateway URL (default TOOLQ_URL or http://127.0.0.1:8000)")
        p.add_argument("--api-key", help="API key (default TOOLQ_API_KEY)")
        return p

    c = common(tsub.add_parser("create", help="create a thread; prints it as JSON"))
    c.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    c.add_argument("--ttl", type=int, dest="ttl_s", help="seconds it lives after its last write")
    c.add_argument("--system", help="a first system message")
    common(tsub.add_parser("list", help="your threads, newest first"))
    s = common(tsub.add_parser("show", help="a thread and its messages"))
    s.add_argument("thread_id")
    r = common(tsub.add_parser("run", help="run a thread with a new user message; prints the answer"))
    r.add_argument("thread_id")
    r.add_argument("prompt")
    r.add_argument("--strategy", choices=STRATEGIES, default="enqueue", help="when a run is active (default enqueue)")
    r.add_argument("--tool", action="append", dest="tools", help="allow this tool (repeatable; default all)")
    r.add_argument("--max-tokens", type=int)
    r.add_argument("--no-wait", action="store_true", help="print the accepted run instead of waiting for its answer")
    d = common(tsub.add_parser("delete", help="delete a thread (its runs are cancelled)"))
    d.add_argument("thread_id")
    t.set_defaults(func=cmd_threads)


def _metadata(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--metadata wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


async def _threads(args: argparse.Namespace) -> int:
    from toolq import errors
    from toolq.client import Client

    async with Client(args.url, args.api_key) as client:
        try:
            out: Any
            if args.threads_command == "create":
                system = [{"role": "system", "content": args.system}] if args.system else []
                out = await client.create_thread(metadata=_metadata(args.metadata), ttl_s=args.ttl_s, messages=system)
            elif args.threads_command == "list":
                out = await client.threads(limit=100)
            elif args.threads_command == "show":
                view = (await client.thread(args.thread_id, limit=1)).model_dump(mode="json", exclude={"messages"})
                messages = await client.thread_messages(args.thread_id)
                out = {**view, "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages]}
            elif args.threads_command == "delete":
                out = await client.delete_thread(args.thread_id)
            else:
                fields = {k: v for k, v in (("tools", args.tools), ("max_tokens", args.max_tokens)) if v is not None}
                accepted = await client.run_thread(
                    args.thread_id, args.prompt, multitask_strategy=args.strategy, **fields
                )
                if args.no_wait:
                    out = accepted
                else:
                    result = await client.result(accepted.job_id)
                    if result.content is None:
                        raise CommandError(f"run {accepted.job_id} ended {result.status.value}: {result.error}")
                    print(result.content)
                    return 0
        except errors.ToolqError as e:
            raise CommandError(e.message) from None
    print(json.dumps(out if isinstance(out, dict) else out.model_dump(mode="json"), indent=2, ensure_ascii=False))
    return 0


def cmd_threads(args: argparse.Namespace) -> int:

    check_gateway_url(args.url)
    return asyncio.run(_threads(args))
