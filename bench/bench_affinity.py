"""Affinity: the share of follow-up prompt tokens served from cache, with affinity on against off.

    .venv/bin/python bench/bench_affinity.py [--conversations 8] [--slots 2] [--wait-ms 300] [--rounds 1]
        [--context-tokens 0]

Everything real: a redis-server of its own, two `toolq worker` processes on the bundled SmolLM2
(``--slots`` each), and two gateways on that one fleet: one with ``TOOLQ_AFFINITY_WAIT_MS`` at
``--wait-ms`` and the anchor with it at 0 (affinity off: a job goes to whichever worker asks
first). The caller is the official ``openai`` package. In each mode, ``--conversations``
client-tool conversations run interleaved: all their first turns at once (the model must call the
caller's get_weather, one call), then all their follow-ups at once (the transcript plus the
tool's result). The figure is, over the follow-ups, cached prompt tokens / prompt tokens (the
usage's ``prompt_tokens_details.cached_tokens``), and the ratio on / off. Modes alternate
(off, on, off, on, ...) for ``--rounds``, each round with new conversations, so the machine's
drift falls on both alike.

``--context-tokens N`` gives each conversation's system message about N tokens of notes of its
own (issue 18 asks for the figure at 3,000 tokens or more of context; bench_resume.py --case 3
runs this with that). Each worker keeps its conversations' states in host memory past its slots
(worker/engine/tiers/), so a follow-up served by the worker that ran its first turn is cached
whatever the slot count; one that runs on the other worker shares only the template's head.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.workers import WorkerProcess  # noqa: E402
from toolq.local import free_port  # noqa: E402

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Quito", "Hanoi", "Dakar", "Perth", "Riga", "Sucre", "Male", "Baku"]
SYSTEM = (
    "You are a travel assistant. You answer briefly and use the weather tool whenever the user asks "
    "about the weather in a place. Conversation {n}."
)


class Gateway:
    """`toolq gateway` in a process of its own, with its affinity wait."""

    def __init__(self, redis_url: str, wait_ms: int):
        self.url = f"http://127.0.0.1:{(port := free_port())}"
        env = {**os.environ, "TOOLQ_LOG_LEVEL": "warning", "TOOLQ_REGISTRY_CACHE_S": "0"}
        env.pop("TOOLQ_API_KEYS", None)
        env["TOOLQ_AFFINITY_WAIT_MS"] = str(wait_ms)
        cmd = [sys.executable, "-m", "toolq", "gateway", "--port", str(port), "--redis", redis_url]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the gateway did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


def notes(n: int, tokens: int) -> str:
    """About ``tokens`` tokens of notes that only conversation ``n`` has (~22 tokens a note)."""
    return " ".join(
        f"Note {n}.{i}: the ferry to island {(i * 7 + n) % 31} leaves at {(i + n) % 24}:{i * 13 % 60:02d}."
        for i in range(tokens // 22)
    )


def conversation(client: openai.OpenAI, model: str, n: int, city: str, context: int) -> list[dict[str, Any]]:
    system = SYSTEM.format(n=n) + (f" Travel notes: {notes(n, context)}" if context else "")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"What is the weather in {city} today?"},
    ]
    first = client.chat.completions.create(
        model=model,
        messages=messages,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=48,
    )
    msg = first.choices[0].message
    call = msg.tool_calls[0]
    return [
        *messages,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": f"Sunny, 21 C in {city}."},
    ]


def follow_up(client: openai.OpenAI, model: str, messages: list[dict[str, Any]]) -> tuple[int, int]:
    done = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], temperature=0, max_tokens=8)
    u = done.usage
    return u.prompt_tokens, u.prompt_tokens_details.cached_tokens


def run_mode(gw: Gateway, model: str, base: int, n: int, context: int) -> tuple[int, int, float]:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=3000)
    t0 = time.monotonic()
    with ThreadPoolExecutor(n) as pool:
        transcripts = list(
            pool.map(lambda i: conversation(client, model, base + i, CITIES[i % len(CITIES)], context), range(n))
        )
        usage = list(pool.map(lambda m: follow_up(client, model, m), transcripts))
    return sum(p for p, _ in usage), sum(c for _, c in usage), time.monotonic() - t0


def placements(gw: Gateway, model: str) -> dict[str, int]:
    data = httpx.get(gw.url + "/v1/models").json()["data"]
    return next(m for m in data if m["id"] == model)["placements"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--wait-ms", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--context-tokens", type=int, default=0, help="notes per conversation's system message")
    args = ap.parse_args()

    server = RedisServer()
    server.start()
    url = server.url + "/0"
    # a loaded machine decodes slowly: the default job timeout would end turns that are only slow
    # and two workers share the machine's cores: each takes half (a worker takes all of them by
    # default, and four decode threads on two cores wait on each other at every step)
    env = {"TOOLQ_JOB_TIMEOUT_S": "3000", "TOOLQ_N_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}
    workers = [WorkerProcess(url, tools=(), extra=("--slots", str(args.slots)), env=env) for _ in range(2)]
    gateways: dict[str, Gateway] = {}
    try:
        for w in workers:
            w.wait_ready(300)
        for mode, wait in (("off", 0), ("on", args.wait_ms)):
            gateways[mode] = Gateway(url, wait)
        model = httpx.get(gateways["on"].url + "/v1/models").json()["data"][0]["id"]
        totals = {m: [0, 0, 0.0] for m in gateways}
        base = 0
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                prompt, cached, secs = run_mode(gateways[mode], model, base, args.conversations, args.context_tokens)
                base += args.conversations
                t = totals[mode]
                t[0], t[1], t[2] = t[0] + prompt, t[1] + cached, t[2] + secs
                share = cached / prompt if prompt else 0.0
                print(f"{mode:>3}: follow-up prompt tokens {prompt}, cached {cached} ({share:.1%}), {secs:.0f} s")
        shares = {m: t[1] / t[0] if t[0] else 0.0 for m, t in totals.items()}
        print()
        load = os.getloadavg()[0]
        print(f"load: {load:.1f} (1 min), 2 workers x {args.slots} slots, {args.conversations} conversations")
        on, off = shares["on"], shares["off"]
        print(f"cached share of follow-up prompt tokens: affinity on {on:.1%}, off (anchor) {off:.1%}")
        if off:
            print(f"ratio on / off: {on / off:.2f}x")
        print(f"placements (on): {placements(gateways['on'], model)}")
    finally:
        for gw in gateways.values():
            gw.stop()
        for w in workers:
            w.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
