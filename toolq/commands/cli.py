"""`toolq submit | events | demo | tools serve`, and the subcommands the services plug in (`worker`, `parse`,
`render`, `gateway`).

The public package imports no service. The worker and the gateway register their subcommands
through the `toolq.commands` entry-point group (pyproject.toml): each entry point is a
`register(subparsers)` that only adds argparse subcommands, and each handler imports its service
when run. So `toolq submit` never loads llama.cpp or FastAPI, and an install without an extra still
runs every other command; the missing one says which extra to install.

Bad input is answered with one line on stderr and exit status 2, never a traceback: a handler
raises `CommandError` (``toolq/errors.py``) with the line to print.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version
from typing import Any

from toolq.commands.gateway_url import check_gateway_url
from toolq.commands.serve_tools import register as register_tools
from toolq.errors import CommandError

COMMANDS_GROUP = "toolq.commands"
EXIT_USAGE = 2


# ---------------------------------------------------------------- commands of the public package


def cmd_submit(args: argparse.Namespace) -> int:
    from toolq.commands.console import submit_and_follow

    check_gateway_url(args.url)
    return asyncio.run(submit_and_follow(args))


def cmd_events(args: argparse.Namespace) -> int:
    from toolq.commands.console import follow_job

    check_gateway_url(args.url)
    return asyncio.run(follow_job(args))


def cmd_demo(args: argparse.Namespace) -> int:
    try:  # the demo starts a worker and a gateway: the light client has neither
        from toolq.commands.demo import run_demo
    except ImportError as e:
        need = "pip install 'toolq[worker,gateway]'"
        raise CommandError(f"demo needs the worker and gateway extras ({e}): {need}") from None

    return run_demo(args)


# ---------------------------------------------------------------- service commands (entry points)


def _missing_requirement(ep: EntryPoint) -> str | None:
    """The first requirement of the extra this entry point is named after that is not installed.

    The entry points are named for their extras (pyproject.toml: `worker`, `gateway`).
    """
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None
    of_extra = re.compile(rf"""extra\s*==\s*["']{re.escape(ep.name)}["']""")
    for requirement in dist.requires or ():
        spec, _, marker = requirement.partition(";")
        project = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if project is None or not of_extra.search(marker):
            continue
        try:
            version(project.group(1))
        except PackageNotFoundError:
            return project.group(1)
    return None


def _needs_extra(extra: str, reason: str) -> str:
    return f"needs the {extra} extra ({reason}): pip install 'toolq[{extra}]'"


def _add_unavailable(sub: Any, ep: EntryPoint, error: ImportError) -> None:
    """A stand-in for a service whose commands cannot even be registered: running it says why."""
    p = sub.add_parser(
        ep.name, help=f"(not installed: needs the {ep.name} extra)", add_help=False, prefix_chars="\0"
    )  # takes any flags, so the answer is the one line below
    p.add_argument("rest", nargs="*")
    p.set_defaults(unavailable=_needs_extra(ep.name, str(error)))


def _add_service_commands(sub: Any) -> None:
    seen: set[str] = set()
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        before = set(sub.choices)
        try:
            register = ep.load()
        except ImportError as e:
            _add_unavailable(sub, ep, e)
            continue
        register(sub)
        for name in set(sub.choices) - before:
            sub.choices[name].set_defaults(entry_point=ep)


def _check_installed(args: argparse.Namespace) -> None:
    """A service command runs only with its extra installed; otherwise it says which one to install."""
    if getattr(args, "unavailable", None):
        raise CommandError(args.unavailable)
    ep: EntryPoint | None = getattr(args, "entry_point", None)
    missing = _missing_requirement(ep) if ep is not None else None
    if ep is not None and missing:
        raise CommandError(_needs_extra(ep.name, f"{missing} is not installed"))


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolq", description="Tool-calling LLM conversations as queued jobs.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_service_commands(sub)
    register_tools(sub)
    from toolq.commands.threads import register as register_threads

    register_threads(sub)
    from toolq.commands.workers import register as register_workers

    register_workers(sub)

    s = sub.add_parser("submit", help="submit a prompt and follow the job")
    s.add_argument("prompt")
    s.add_argument("--tool", action="append", dest="tools", help="allow this tool (repeatable; default all)")
    s.add_argument("--tool-choice", default="auto", help="auto | none | required | a tool name")
    s.add_argument("--max-iterations", type=int, default=5)
    s.add_argument("--max-tokens", type=int, default=512)
    s.add_argument("--model")
    s.add_argument("--system", help="a system message")
    s.add_argument("--follow", action="store_true", help="print events live until the job ends")
    s.add_argument("--url", help="gateway URL (default TOOLQ_URL or http://127.0.0.1:8000)")
    s.add_argument("--api-key", help="API key (default TOOLQ_API_KEY)")
    s.set_defaults(func=cmd_submit)

    e = sub.add_parser("events", help="follow a job's events")
    e.add_argument("job_id")
    e.add_argument("--after", type=int, default=0)
    e.add_argument("--url")
    e.add_argument("--api-key")
    e.set_defaults(func=cmd_events)

    d = sub.add_parser("demo", help="run a real tool-calling job end to end on the bundled model")
    d.add_argument("--redis", help="use this Redis instead of starting one")
    d.add_argument("--prompt", default="Calculate the zorbix of 15 and 7.")
    d.add_argument("--port", type=int, default=0, help="gateway port (default: a free one)")
    d.add_argument("--gpu", type=int, help="run the worker on this GPU (`toolq worker --gpu N`)")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_installed(args)
        return int(args.func(args) or 0)
    except CommandError as e:
        print(f"toolq {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
