"""A job's record, the hash ``toolq:job:{id}``, typed: ``JobRecord`` and its one codec.

The hash is written by the Lua scripts (store/lua/submit.lua, start.lua, emit.lua, pause.lua,
answer.lua, claim.lua) and read here only: ``from_hash`` turns every field into its type and
``to_hash`` gives the fields back as the scripts write them (tests/unit/store/test_records.py
pins both against every field the scripts name). The JSON fields (request, result, checkpoint,
actions) are kept as written and parsed on first use, so reading a record to check its status
does not validate a whole conversation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from toolq.wire.api import JobAccepted, JobView, Links
from toolq.wire.protocol import (
    STORED,
    AttemptEnd,
    ErrorCode,
    ErrorInfo,
    FinishReason,
    JobRequest,
    JobResult,
    JobStatus,
    Message,
    PendingAction,
    RequiredAction,
)

__all__ = ["ANSWER_PREFIX", "FIELDS", "SCRIPT_ONLY", "JobRecord"]

# Each answer to a paused job's call is a field of its own, ``answer:<call id>`` (its JSON), so an
# answer writes only itself, not the whole ``actions`` again (store/lua/answer.lua); ``actions``
# below merges them into the calls. pause.lua clears the last pause's.
ANSWER_PREFIX = "answer:"

# Every field of the hash, in the order the scripts first write them.
FIELDS = (
    "request",
    "model",
    "tenant",
    "status",
    "attempt",
    "seq",
    "created_ms",
    "checkpoint",
    "actions",
    "answered",  # how many of the pause's calls have their answer (answer.lua; pause.lua clears it)
    "action_deadline_ms",
    "terminal",
    "result",
    "finished_ms",
    "priority",  # fair share (store/fair.py): 0 to 9 within the tenant
    "job_tokens",  # the tenant's per-job token cap, stamped at submission (worker/budget.py)
    "webhook",  # the job's webhook JSON {"url", "events"} (store/deliveries.py)
    "thread",  # a run's thread, and how its end is written there (store/threads.py)
    "thread_from",
    "thread_keep",
    "thread_strategy",
    "traceparent",  # the W3C trace context the job's spans continue (toolq/tracing/carrier.py)
    "tracestate",
    "worker",  # the worker of the latest started attempt (start.lua, with `started`)
    "prefer",  # affinity (store/affinity.py): the worker the job is offered to first,
    "prefer_until",  # until when (unix ms, Redis's clock)
    "placed",  # how dispatch.lua placed it: affinity, fallback_wait, fallback_gone, fallback_full
    "placed_ms",  # when dispatch.lua gave it its tenant's turn (fair share on; Redis's clock)
    "worker_attempt",  # the attempt `worker` started (start.lua, with `started`)
    # Takeovers (store/lua/claim.lua): each taken-over attempt's worker and how it ended
    # (JSON list of AttemptEnd), how many of them counted as lost, and '1' once the job is
    # quarantined (it ends worker_lost instead of being run again).
    "attempts",
    "lost_attempts",
    "quarantined",
)

# Fields only the thread scripts read: a run's request and arq job held back until its turn
# (store/lua/thread_run.lua writes them, thread_turns.lua builds the request from them).
# The codec leaves them alone.
SCRIPT_ONLY = (
    "th_head",
    "th_lead",
    "th_input",
    "th_tail",
    "th_arq_job",
    "th_arq_result",
    "th_queue",
    "th_arq_id",
    "th_payload",
    "th_expires_ms",
    "th_wake",
    "th_wake_backlog",
    "counted_tokens",  # tokens already in the tenant's minute/day windows (emit.lua)
    "budget_day",  # "<counter> <tokens>" the job still holds against its tenant's budgets (budget.lua)
    "budget_minute",
    "th_fair",  # the fair-share prefix when the run takes its tenant's fair turn, else ''
    "th_priority",  # the run's priority within its tenant, for that turn
    "th_prefer_wait",  # how long the run is left to the worker that ran the thread's last run
    "th_worker_wake",  # that worker's own wake list's prefix (thread_turns.lua: thread_start)
    "spare",  # '1': a batch line, which dispatch.lua gives only to a free engine slot (submit.lua)
)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    status: JobStatus = JobStatus.queued
    model: str = ""
    tenant: str = ""
    attempt: int = 1  # bumped by each resume (answer.lua) and each takeover (claim.lua)
    seq: int = 0  # the last event's seq
    created_ms: int = 0
    terminal: bool = False  # a final, error or cancelled event was written: nothing more will be
    finished_ms: int | None = None
    action_deadline_ms: int | None = None  # set by pause.lua; kept after the pause ends
    # The JSON fields as written ("" when absent); their typed views are below.
    request_json: str = ""
    result_json: str = ""
    checkpoint_json: str = ""
    actions_json: str = ""
    answers_json: tuple[tuple[str, str], ...] = ()  # (call id, answer JSON), the ``answer:`` fields
    answered: int = 0
    priority: int | None = None  # submit.lua writes it (0 to 9); a thread run's record has none
    job_tokens: int | None = None
    webhook_json: str = ""
    thread: str = ""
    thread_from: int | None = None
    thread_keep: str = ""
    thread_strategy: str = ""
    traceparent: str = ""  # written by submit.lua when the gateway traces; the worker's spans continue it
    tracestate: str = ""
    worker: str = ""
    prefer: str = ""
    prefer_until_ms: int | None = None
    placed: str = ""
    placed_ms: int | None = None
    worker_attempt: int | None = None
    attempts_json: str = ""
    lost_attempts: int = 0
    quarantined: bool = False

    @classmethod
    def from_hash(cls, job_id: str, h: dict[bytes, bytes]) -> JobRecord:
        d = {k.decode(): v.decode() for k, v in h.items()}
        return cls(
            job_id=job_id,
            status=JobStatus(d["status"]) if d.get("status") else JobStatus.queued,
            model=d.get("model", ""),
            tenant=d.get("tenant", ""),
            attempt=int(d.get("attempt") or 1),
            seq=int(d.get("seq") or 0),
            created_ms=int(d.get("created_ms") or 0),
            terminal=d.get("terminal") == "1",
            finished_ms=int(d["finished_ms"]) if d.get("finished_ms") else None,
            action_deadline_ms=int(d["action_deadline_ms"]) if d.get("action_deadline_ms") else None,
            request_json=d.get("request", ""),
            result_json=d.get("result", ""),
            checkpoint_json=d.get("checkpoint", ""),
            actions_json=d.get("actions", ""),
            answers_json=tuple(
                (k[len(ANSWER_PREFIX) :], v) for k, v in sorted(d.items()) if k.startswith(ANSWER_PREFIX)
            ),
            answered=int(d.get("answered") or 0),
            priority=int(d["priority"]) if d.get("priority") else None,
            job_tokens=int(d["job_tokens"]) if d.get("job_tokens") else None,
            webhook_json=d.get("webhook", ""),
            thread=d.get("thread", ""),
            thread_from=int(d["thread_from"]) if d.get("thread_from") else None,
            thread_keep=d.get("thread_keep", ""),
            thread_strategy=d.get("thread_strategy", ""),
            traceparent=d.get("traceparent", ""),
            tracestate=d.get("tracestate", ""),
            worker=d.get("worker", ""),
            prefer=d.get("prefer", ""),
            prefer_until_ms=int(d["prefer_until"]) if d.get("prefer_until") else None,
            placed=d.get("placed", ""),
            placed_ms=int(d["placed_ms"]) if d.get("placed_ms") else None,
            worker_attempt=int(d["worker_attempt"]) if d.get("worker_attempt") else None,
            attempts_json=d.get("attempts", ""),
            lost_attempts=int(d.get("lost_attempts") or 0),
            quarantined=d.get("quarantined") == "1",
        )

    def to_hash(self) -> dict[str, str]:
        """The hash as the scripts write it (fields that were never written are left out)."""
        h = {
            "request": self.request_json,
            "model": self.model,
            "tenant": self.tenant,
            "status": self.status.value,
            "attempt": str(self.attempt),
            "seq": str(self.seq),
            "created_ms": str(self.created_ms),
            "checkpoint": self.checkpoint_json,
            "actions": self.actions_json,
            "answered": str(self.answered) if self.answered else "",
            **{ANSWER_PREFIX + call_id: answer for call_id, answer in self.answers_json},
            "action_deadline_ms": "" if self.action_deadline_ms is None else str(self.action_deadline_ms),
            "terminal": "1" if self.terminal else "",
            "result": self.result_json,
            "finished_ms": "" if self.finished_ms is None else str(self.finished_ms),
            "priority": "" if self.priority is None else str(self.priority),
            "job_tokens": "" if self.job_tokens is None else str(self.job_tokens),
            "webhook": self.webhook_json,
            "thread": self.thread,
            "thread_from": "" if self.thread_from is None else str(self.thread_from),
            "thread_keep": self.thread_keep,
            "thread_strategy": self.thread_strategy,
            "traceparent": self.traceparent,
            "tracestate": self.tracestate,
            "worker": self.worker,
            "prefer": self.prefer,
            "prefer_until": "" if self.prefer_until_ms is None else str(self.prefer_until_ms),
            "placed": self.placed,
            "placed_ms": "" if self.placed_ms is None else str(self.placed_ms),
            "worker_attempt": "" if self.worker_attempt is None else str(self.worker_attempt),
            "attempts": self.attempts_json,
            "lost_attempts": str(self.lost_attempts) if self.lost_attempts else "",
            "quarantined": "1" if self.quarantined else "",
        }
        return {k: v for k, v in h.items() if v != ""}

    @property
    def submitted(self) -> bool:
        """Whether the hash holds a submitted job (submit.lua writes the request with the rest);
        a hash without it is what a late write left of an expired job."""
        return bool(self.request_json)

    @property
    def paused(self) -> bool:
        return self.status is JobStatus.requires_action and not self.terminal

    @cached_property
    def request(self) -> JobRequest:
        return JobRequest.model_validate_json(self.request_json, context=STORED)

    @cached_property
    def result(self) -> JobResult | None:
        """Stored with the terminal event."""
        return JobResult.model_validate_json(self.result_json) if self.result_json else None

    @cached_property
    def checkpoint(self) -> dict[str, Any] | None:
        """The loop's state as of the last tool result or pause (the worker's own format)."""
        return json.loads(self.checkpoint_json) if self.checkpoint_json else None

    @cached_property
    def actions(self) -> dict[str, dict[str, Any]]:
        """The calls of the last pause by call id (a PendingAction's fields plus ``answer``, from
        the answer's own field)."""
        actions: dict[str, dict[str, Any]] = json.loads(self.actions_json) if self.actions_json else {}
        for call_id, answer in self.answers_json:
            if call_id in actions:
                actions[call_id] = {**actions[call_id], "answer": json.loads(answer)}
        return actions

    @cached_property
    def attempts(self) -> list[AttemptEnd]:
        """The attempts other workers took over, oldest first (claim.lua)."""
        return [AttemptEnd.model_validate(a) for a in json.loads(self.attempts_json)] if self.attempts_json else []

    @property
    def required_action(self) -> RequiredAction | None:
        """The calls a paused job still waits on (pause.lua writes them, answer.lua the answers)."""
        if self.status is not JobStatus.requires_action or not self.actions:
            return None
        calls = [
            PendingAction.model_validate({k: v for k, v in a.items() if k != "answer"})
            for a in self.actions.values()
            if a.get("answer") is None
        ]
        return RequiredAction(calls=calls, deadline_ms=self.action_deadline_ms or 0)

    def failed(self, attempt: int, finish_reason: FinishReason, code: ErrorCode, message: str) -> JobResult:
        """The result of a job the store ends without a worker (a caller's deadline, a poison job):
        failed, with the messages of its last checkpoint, else of its request."""
        checkpoint = self.checkpoint or {}
        messages = [Message.model_validate(m) for m in checkpoint.get("messages", ())] or self.request.messages
        return JobResult(
            job_id=self.job_id,
            status=JobStatus.failed,
            finish_reason=finish_reason,
            error=ErrorInfo(code=code, message=message),
            messages=messages,
            attempt=attempt,
        )

    def view(self) -> JobView:
        """The job as GET /v1/jobs/{id} (and the SDK's ``Client.job``) shows it."""
        return JobView(
            job_id=self.job_id,
            status=self.status,
            model=self.model,
            attempt=self.attempt,
            created_ms=self.created_ms,
            finished_ms=self.finished_ms,
            result=self.result,
            required_action=self.required_action,
            links=Links.of(self.job_id),
        )

    def accepted(self, *, created: bool) -> JobAccepted:
        """The answer to the POST /v1/jobs that made (or, with an idempotency key, found) the job."""
        return JobAccepted(
            job_id=self.job_id, status=self.status, model=self.model, created=created, links=Links.of(self.job_id)
        )
