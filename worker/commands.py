"""The worker's `toolq` subcommands: `worker`, and `parse` and `render` for debugging formats and
templates without a model.

`toolq` finds `register` through the `toolq.commands` entry point (pyproject.toml). Registering
only adds argparse subcommands; each handler imports what it runs (llama.cpp, Jinja, the tools)
when it runs, so the other `toolq` commands start without them. Bad input raises `CommandError`,
which `toolq` prints as one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from toolq.errors import CommandError
from toolq.field_errors import validation_message


def register(subparsers: Any) -> None:
    w = subparsers.add_parser("worker", help="run a worker that holds one model")
    w.add_argument("--gpu", type=int, help="pin to this GPU (sets CUDA_VISIBLE_DEVICES, offloads all layers)")
    w.add_argument("--model", help="GGUF file (default: the bundled SmolLM2)")
    w.add_argument("--name", help="model name; names the queue (default: the file's stem)")
    w.add_argument("--redis", help="Redis URL (default TOOLQ_REDIS_URL)")
    w.add_argument("--threads", type=int, help="CPU threads for llama.cpp")
    w.add_argument("--template", help="chat template file in chat_templates/, a path, or 'gguf'")
    w.add_argument(
        "--format",
        help="tool-call format, or 'auto': the template's own (default: auto with --template gguf, else hermes)",
    )
    w.add_argument("--tools", action="append", help="module whose @tool functions to serve (repeatable)")
    w.add_argument(
        "--mcp",
        action="append",
        metavar="JSON",
        help="MCP server whose tools to serve (repeatable): "
        '{"name": ..., "command": [...]} or {"name": ..., "url": ...}, or a JSON list of them '
        "(default TOOLQ_MCP_SERVERS)",
    )
    w.add_argument(
        "--slots", type=int, help="sequences decoded together in one context (default 4 on a CPU, 16 with --gpu)"
    )
    w.add_argument("--max-jobs", type=int, help="jobs run at once (default: the slot count)")
    w.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    w.add_argument(
        "--engine",
        choices=["llama", "scripted"],
        default="llama",
        help="'scripted' replies by rules from --script (tests and benchmarks only)",
    )
    w.add_argument("--script", help="rules file for --engine scripted")
    w.set_defaults(func=cmd_worker)

    pa = subparsers.add_parser("parse", help="parse model output from stdin into content, tool calls and errors")
    pa.add_argument("--format", default="hermes")
    pa.add_argument("--tools", help="JSON file of tool specs (default: the demo tools)")
    pa.set_defaults(func=cmd_parse)

    r = subparsers.add_parser("render", help="render a job request (JSON on stdin) into the exact prompt text")
    r.add_argument("--template", required=True)
    r.add_argument("--format", default="auto", help="tool-call format, or 'auto': the template's own (default)")
    r.add_argument("--tools", help="JSON file of tool specs (default: the demo tools)")
    r.add_argument("--variant", help="system prompt variant of the format")
    r.add_argument("--bos", default="")
    r.add_argument("--eos", default="")
    r.add_argument("--no-generation-prompt", action="store_true")
    r.set_defaults(func=cmd_render)


# ---------------------------------------------------------------- the worker


def cmd_worker(args: argparse.Namespace) -> int:
    if args.gpu is not None:
        # must happen before llama_cpp is imported: CUDA reads it once, at initialisation
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    from worker.main import run_worker

    overrides = {
        k: v
        for k, v in {
            "redis_url": args.redis,
            "model_path": args.model,
            "model_name": args.name,
            "gpu": args.gpu,
            "n_gpu_layers": -1 if args.gpu is not None else None,
            "n_threads": args.threads,
            "chat_template": args.template,
            "tool_format": args.format,
            "max_jobs": args.max_jobs,
            "slots": args.slots,
            "tool_modules": args.tools or None,
            "metrics_port": args.metrics_port,
            "mcp_servers": _mcp_servers(args.mcp),
        }.items()
        if v is not None
    }
    return run_worker(overrides, engine=args.engine, script=args.script)


def _mcp_servers(values: list[str] | None) -> str | None:
    """The --mcp values as one JSON list (the setting's form); each is checked when the worker starts."""
    if not values:
        return None
    from toolq.mcp import join_server_args

    try:
        return json.dumps(join_server_args(values))
    except ValueError as e:
        raise CommandError(str(e)) from None


# ---------------------------------------------------------------- debug commands


def _tool_format(name: str) -> Any:
    from worker.formats import get_format

    try:
        return get_format(name)
    except (ValueError, KeyError) as e:
        raise CommandError(e.args[0] if e.args else f"unknown tool-call format {name!r}") from None


def _read_tools(path: str | None) -> list[dict[str, Any]]:
    """Tool specs from a JSON file (a list of OpenAI function specs, or {"tools": [...]}), else the demo tools."""
    if not path:
        from toolq.tools import load_tool_modules

        return load_tool_modules(["worker.demo_tools"]).specs()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise CommandError(f"cannot read the tools file {path}: {e.strerror or e}") from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise CommandError(f"the tools file {path} is not JSON: {e}") from None
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise CommandError(
            f"the tools file {path} must hold a list of OpenAI function specs "
            '({"type": "function", "function": {"name": ...}}), or {"tools": [...]}'
        )
    return tools


def cmd_parse(args: argparse.Namespace) -> int:
    fmt = _tool_format(args.format)
    tools = _read_tools(args.tools)
    parsed = fmt.parse(sys.stdin.read(), {t["function"]["name"] for t in tools})
    out = {
        "content": parsed.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in parsed.tool_calls],
        "errors": parsed.errors,
    }
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def _read_request(text: str) -> Any:
    """The job request on stdin: a request object, or just its list of messages."""
    from pydantic import ValidationError

    from toolq.wire.protocol import JobRequest

    try:
        raw = json.loads(text)
    except ValueError as e:
        raise CommandError(f"the request on stdin is not JSON: {e}") from None
    if isinstance(raw, list) or (isinstance(raw, dict) and "messages" not in raw):
        raw = {"messages": raw}
    if not isinstance(raw, dict):
        raise CommandError('the request on stdin must be a JSON object with "messages", or a list of messages')
    try:
        return JobRequest.model_validate(raw)
    except ValidationError as e:
        raise CommandError(f"invalid request: {validation_message(e)}") from None


def cmd_render(args: argparse.Namespace) -> int:
    from worker.formats.choice import check_format_name, choose_format
    from worker.templates import ChatTemplate, TemplateError

    request = _read_request(sys.stdin.read())
    try:
        check_format_name(args.format)
    except ValueError as e:
        raise CommandError(str(e)) from None
    tools = _read_tools(args.tools)
    try:
        template = ChatTemplate.from_file(args.template, bos_token=args.bos, eos_token=args.eos)
        choice = choose_format(args.format, template.source)
        prompt = template.render(
            request.messages,
            tools=tools,
            fmt=choice.format,
            add_generation_prompt=not args.no_generation_prompt,
            prompt_variant=args.variant,
        )
    except TemplateError as e:
        raise CommandError(str(e)) from None
    sys.stdout.write(prompt.text)
    # stdout is the exact prompt; which format shaped it goes to stderr, after a good render.
    print(f"toolq render: tool-call format {choice.name} ({choice.how})", file=sys.stderr)
    if choice.warning:
        print(f"toolq render: warning: {choice.warning}", file=sys.stderr)
    return 0
