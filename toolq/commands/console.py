"""Terminal output for `toolq submit` and `toolq events`: each event printed as it happens.

Exit codes: 0 the job succeeded, 1 it failed, 2 it was cancelled, 3 the gateway refused the
request or could not be reached (the message says which).
"""

from __future__ import annotations

import argparse
import json
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import httpx

from toolq.client import Client
from toolq.errors import ToolqError
from toolq.wire.payloads import (
    CancelledData,
    ErrorData,
    FinalData,
    QueuedData,
    StartedData,
    TokenData,
    ToolCallData,
    ToolResultData,
    payload,
)
from toolq.wire.protocol import Event, EventType

if TYPE_CHECKING or find_spec("rich") is not None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
else:  # the light client installs no rich (pyproject.toml): the same calls, as plain lines
    from toolq.commands.plain_console import Console, Panel, escape

EXIT_OK, EXIT_FAILED, EXIT_CANCELLED, EXIT_REFUSED = 0, 1, 2, 3
_EXIT_OF = {EventType.final: EXIT_OK, EventType.error: EXIT_FAILED, EventType.cancelled: EXIT_CANCELLED}


def _args(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return json.dumps(arguments, ensure_ascii=False)


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " …"


def print_event(console: Console, event: Event) -> None:
    """Print one event the way a person wants to read it."""
    d = payload(event)
    if isinstance(d, QueuedData):
        console.print(f"[dim]#{event.seq} queued for model {escape(d.model or '?')}[/dim]")
    elif isinstance(d, StartedData):
        again = " [yellow](resumed)[/yellow]" if d.resumed else ""
        console.print(f"[dim]#{event.seq} started on {escape(d.worker or '?')}, attempt {d.attempt}[/dim]{again}")
    elif isinstance(d, TokenData):
        console.print(escape(d.text), end="", soft_wrap=True, highlight=False)
    elif isinstance(d, ToolCallData):
        name, args = escape(d.name or "?"), escape(_args(d.arguments))
        console.print(f"[bold cyan]→ {name}[/bold cyan]({args})", highlight=False)
    elif isinstance(d, ToolResultData):
        ms = d.duration_ms
        took = f" [dim]{ms:.0f} ms[/dim]" if ms is not None and d.executed else ""
        reused = "" if d.executed else " [dim](earlier result reused)[/dim]"
        if d.ok:
            console.print(f"  [green]← {escape(_short(d.content))}[/green]{took}{reused}", highlight=False)
        else:
            console.print(f"  [red]← {escape(_short(d.error or d.content or 'failed'))}[/red]{took}", highlight=False)
    elif isinstance(d, FinalData):
        subtitle = f"{d.finish_reason}, {d.iterations} iteration(s), {d.usage.completion_tokens} tokens"
        console.print(
            Panel(
                escape(d.content or ""),
                title="answer",
                subtitle=subtitle,
                border_style="green" if d.finish_reason == "stop" else "yellow",
            )
        )
    elif isinstance(d, ErrorData):
        console.print(f"[bold red]error[/bold red] {escape(d.code)}: {escape(d.message)}")
    elif isinstance(d, CancelledData):
        console.print(f"[yellow]cancelled[/yellow] {escape(d.reason)}")


def _tool_choice(value: str | None) -> Any:
    if value in (None, "", "auto", "none", "required"):
        return value or "auto"
    return {"type": "function", "function": {"name": value}}


async def _follow(client: Client, console: Console, job_id: str, after: int) -> int:
    async for event in client.events(job_id, after=after):
        print_event(console, event)
        if event.terminal:
            return _EXIT_OF[event.type]
    return EXIT_FAILED  # unreachable: events() ends only after a terminal event


def _refused(console: Console, exc: Exception) -> int:
    if isinstance(exc, ToolqError):
        console.print(f"[bold red]{exc.code}[/bold red]: {escape(exc.message)}")
    else:
        console.print(f"[bold red]cannot reach the gateway[/bold red]: {escape(str(exc))}")
    return EXIT_REFUSED


async def submit_and_follow(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    fields: dict[str, Any] = {
        "tool_choice": _tool_choice(args.tool_choice),
        "max_iterations": args.max_iterations,
        "max_tokens": args.max_tokens,
    }
    for name in ("tools", "model", "system"):
        if getattr(args, name, None):
            fields[name] = getattr(args, name)
    async with Client(args.url, args.api_key) as client:
        try:
            job_id = await client.submit(args.prompt, **fields)
        except (ToolqError, httpx.HTTPError, ValueError) as e:
            return _refused(console, e)
        if not args.follow:
            console.print(job_id, highlight=False)
            return EXIT_OK
        console.print(f"[bold]job[/bold] {job_id}", highlight=False)
        try:
            return await _follow(client, console, job_id, 0)
        except (ToolqError, httpx.HTTPError) as e:
            return _refused(console, e)


async def follow_job(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    async with Client(args.url, args.api_key) as client:
        try:
            return await _follow(client, console, args.job_id, args.after or 0)
        except (ToolqError, httpx.HTTPError) as e:
            return _refused(console, e)
