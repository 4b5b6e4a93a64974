"""`toolq demo`: one real tool-calling conversation through Redis, a worker and the gateway.

It reuses the Redis at TOOLQ_REDIS_URL (default: the local one) when one answers, else starts a
redis-server of its own; starts a worker on the bundled SmolLM2 model with the demo tools and a
gateway; submits a job over HTTP; prints each tool call, tool result and the final answer as
they happen; stops what it started. Exit 0 when the job ends with `final`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack

import httpx
from rich.console import Console

from store.fleet import registered_workers
from toolq.errors import CommandError
from toolq.local import free_port, redis_answers
from toolq.settings import RedisSettings
from toolq.wire.protocol import EventType, JobRequest, Message

console = Console(highlight=False)


def _start_redis(stack: ExitStack) -> str:
    exe = shutil.which("redis-server")
    if exe is None:
        raise CommandError("no Redis answers and redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="toolq-demo-redis-"))
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stack.callback(_stop, proc, "redis")
    url = f"redis://127.0.0.1:{port}/0"
    _wait(lambda: redis_answers(url), 10, "redis-server did not start")
    console.print(f"[dim]started redis-server on port {port}[/dim]")
    return url


def _stop(proc: subprocess.Popen[bytes], what: str) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait(
    check: Callable[[], bool],
    timeout: float,
    message: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: str | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            tail = open(log).read()[-3000:] if log else ""
            raise SystemExit(f"{message}: the process exited with {proc.returncode}\n{tail}")
        if time.monotonic() > deadline:
            raise SystemExit(message)
        time.sleep(0.1)


def _spawn(stack: ExitStack, args: list[str], name: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    log = stack.enter_context(tempfile.NamedTemporaryFile(prefix=f"toolq-demo-{name}-", suffix=".log", delete=False))
    proc = subprocess.Popen([sys.executable, "-m", "toolq", *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    stack.callback(_stop, proc, name)
    return proc, log.name


def run_demo(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        url = args.redis or RedisSettings().redis_url
        if not args.redis and not redis_answers(url):
            url = _start_redis(stack)
        elif not redis_answers(url):
            raise CommandError(f"Redis at {url} does not answer")
        else:
            console.print(f"[dim]using Redis at {url}[/dim]")
        env = {**os.environ, "TOOLQ_REDIS_URL": url}
        before = registered_workers(url)

        gpu = [] if args.gpu is None else ["--gpu", str(args.gpu)]
        started = time.monotonic()
        worker, wlog = _spawn(stack, ["worker", "--redis", url, *gpu], "worker", env)
        where = f" on GPU {args.gpu}" if gpu else ""
        console.print(f"[dim]starting a worker on the bundled SmolLM2 model{where}…[/dim]")
        _wait(
            lambda: bool(registered_workers(url) - before),
            120,
            "the worker did not come up",
            worker,
            wlog,
        )
        # its cold start: process start, imports, model load, registration (docs/operations.md "Scaling")
        console.print(f"[dim]worker registered {time.monotonic() - started:.1f} s after its start[/dim]")

        port = args.port or free_port()
        gateway, glog = _spawn(stack, ["gateway", "--port", str(port), "--redis", url], "gateway", env)
        base = f"http://127.0.0.1:{port}"
        _wait(lambda: _ready(base), 60, "the gateway did not become ready", gateway, glog)
        console.print(f"[dim]gateway ready at {base}[/dim]\n")
        return asyncio.run(_converse(base, args.prompt))


def _ready(base: str) -> bool:
    try:
        return httpx.get(base + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


async def _converse(base: str, prompt: str) -> int:
    from toolq.client import Client
    from toolq.commands.console import print_event

    request = JobRequest(
        messages=[Message(role="user", content=prompt)],
        tools=["calculate_zorbix"],
        tool_choice="required",
        parallel_tool_calls=False,
        max_iterations=3,
        max_tokens=128,
    )
    console.print(f"[bold]user:[/bold] {prompt}")
    async with Client(base) as client:
        job_id = await client.submit(request)
        console.print(f"[dim]job {job_id}[/dim]")
        last = None
        async for event in client.events(job_id):
            print_event(console, event)
            last = event
        result = await client.result(job_id, timeout=30)
    ok = last is not None and last.type == EventType.final
    usage = result.usage
    console.print(
        f"\n[dim]{result.iterations} rounds, {usage.prompt_tokens} prompt tokens "
        f"({usage.cached_prompt_tokens} from cache), {usage.completion_tokens} generated, "
        f"{result.timings.total_ms:.0f} ms[/dim]"
    )
    return 0 if ok else 1
