"""Start a worker process: settings, logging, the engine (loaded once), then arq's loop."""

from __future__ import annotations

from typing import Any, Optional

from toolq.logs import configure_logging
from worker.settings import WorkerSettings


def load(settings: WorkerSettings, engine: str = "llama", script: Optional[str] = None) -> Any:
    if engine == "scripted":
        from worker.scripted import ScriptedEngine

        if not script:
            raise SystemExit("--engine scripted needs --script FILE")
        return ScriptedEngine.from_file(script, name=settings.model_name or "scripted")
    from worker.engine import load_engine

    return load_engine(settings)


def run_worker(overrides: dict[str, Any], *, engine: str = "llama", script: Optional[str] = None) -> int:
    configure_logging()
    settings = WorkerSettings(**overrides)
    if engine == "scripted" and settings.model_name is None:
        settings.model_name = "scripted"
    eng = load(settings, engine, script)
    if settings.metrics_port:
        from worker.metrics import serve_metrics

        serve_metrics(settings.metrics_port)
    from worker.app import create_worker

    worker = create_worker(settings, eng)
    try:
        worker.run()
    finally:
        eng.close()
    return 0
