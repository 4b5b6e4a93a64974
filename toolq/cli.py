"""`toolq worker | gateway | submit | events | parse | render | demo`.

This module stays light: the worker, gateway and debug commands import their services only when
run, so `toolq submit` never loads llama.cpp or FastAPI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence


def _read_tools(path: Optional[str]):
    """Tool specs from a JSON file (a list of OpenAI function specs), else the demo tools."""
    if path:
        data = json.loads(Path(path).read_text())
        return data["tools"] if isinstance(data, dict) else data
    from worker.tools import load_tool_modules

    return load_tool_modules(["worker.demo_tools"]).specs()


# ---------------------------------------------------------------- debug commands


def cmd_parse(args: argparse.Namespace) -> int:
    from worker.formats import get_format

    fmt = get_format(args.format)
    tools = _read_tools(args.tools)
    parsed = fmt.parse(sys.stdin.read(), {t["function"]["name"] for t in tools})
    out = {"content": parsed.content,
           "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in parsed.tool_calls],
           "errors": parsed.errors}
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from toolq.protocol import JobRequest
    from worker.formats import get_format
    from worker.templates import ChatTemplate

    raw = json.loads(sys.stdin.read())
    request = JobRequest.model_validate(raw if "messages" in raw else {"messages": raw})
    template = ChatTemplate.from_file(args.template, bos_token=args.bos, eos_token=args.eos)
    prompt = template.render(request.messages, tools=_read_tools(args.tools), fmt=get_format(args.format),
                             add_generation_prompt=not args.no_generation_prompt, prompt_variant=args.variant)
    sys.stdout.write(prompt.text)
    return 0


# ---------------------------------------------------------------- services


def cmd_worker(args: argparse.Namespace) -> int:
    if args.gpu is not None:
        # must happen before llama_cpp is imported: CUDA reads it once, at initialisation
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    from worker.main import run_worker

    overrides = {k: v for k, v in {
        "redis_url": args.redis, "model_path": args.model, "model_name": args.name, "gpu": args.gpu,
        "n_gpu_layers": -1 if args.gpu is not None else None, "n_threads": args.threads,
        "chat_template": args.template, "tool_format": args.format, "max_jobs": args.max_jobs,
        "tool_modules": args.tools or None, "metrics_port": args.metrics_port,
    }.items() if v is not None}
    return run_worker(overrides, engine=args.engine, script=args.script)


def cmd_gateway(args: argparse.Namespace) -> int:
    from gateway.main import run_gateway

    return run_gateway(host=args.host, port=args.port, redis_url=args.redis)


def cmd_submit(args: argparse.Namespace) -> int:
    from toolq.console import submit_and_follow

    return asyncio.run(submit_and_follow(args))


def cmd_events(args: argparse.Namespace) -> int:
    from toolq.console import follow_job

    return asyncio.run(follow_job(args))


def cmd_demo(args: argparse.Namespace) -> int:
    from toolq.demo import run_demo

    return run_demo(args)


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toolq", description="Tool-calling LLM conversations as queued jobs.")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker that holds one model")
    w.add_argument("--gpu", type=int, help="pin to this GPU (sets CUDA_VISIBLE_DEVICES, offloads all layers)")
    w.add_argument("--model", help="GGUF file (default: the bundled SmolLM2)")
    w.add_argument("--name", help="model name; names the queue (default: the file's stem)")
    w.add_argument("--redis", help="Redis URL (default TOOLQ_REDIS_URL)")
    w.add_argument("--threads", type=int, help="CPU threads for llama.cpp")
    w.add_argument("--template", help="chat template file in chat_templates/, a path, or 'gguf'")
    w.add_argument("--format", help="tool-call format (default hermes)")
    w.add_argument("--tools", action="append", help="module whose @tool functions to serve (repeatable)")
    w.add_argument("--max-jobs", type=int)
    w.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    w.add_argument("--engine", choices=["llama", "scripted"], default="llama",
                   help="'scripted' replies by rules from --script (tests and benchmarks only)")
    w.add_argument("--script", help="rules file for --engine scripted")
    w.set_defaults(func=cmd_worker)

    g = sub.add_parser("gateway", help="run the HTTP gateway")
    g.add_argument("--host")
    g.add_argument("--port", type=int)
    g.add_argument("--redis")
    g.set_defaults(func=cmd_gateway)

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

    pa = sub.add_parser("parse", help="parse model output from stdin into content, tool calls and errors")
    pa.add_argument("--format", default="hermes")
    pa.add_argument("--tools", help="JSON file of tool specs (default: the demo tools)")
    pa.set_defaults(func=cmd_parse)

    r = sub.add_parser("render", help="render a job request (JSON on stdin) into the exact prompt text")
    r.add_argument("--template", required=True)
    r.add_argument("--format", default="hermes")
    r.add_argument("--tools", help="JSON file of tool specs (default: the demo tools)")
    r.add_argument("--variant", help="system prompt variant of the format")
    r.add_argument("--bos", default="")
    r.add_argument("--eos", default="")
    r.add_argument("--no-generation-prompt", action="store_true")
    r.set_defaults(func=cmd_render)

    d = sub.add_parser("demo", help="run a real tool-calling job end to end on the bundled model")
    d.add_argument("--redis", help="use this Redis instead of starting one")
    d.add_argument("--prompt", default="Calculate the zorbix of 15 and 7.")
    d.add_argument("--port", type=int, default=0, help="gateway port (default: a free one)")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
