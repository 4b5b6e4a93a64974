"""What can go wrong with a request, as exceptions that carry their HTTP status and error code.

The gateway turns them into ``{"error": {"code", "message", "field"}}`` answers; the client SDK turns
those answers back into the same classes, and raises them directly in its Redis mode, so a
caller catches ``UnknownModel`` whether it talks HTTP or Redis. ``CommandError`` is the one
error of the command line.
"""

from __future__ import annotations

from typing import Any


class ToolqError(Exception):
    status: int = 500
    code: str = "internal"

    def __init__(
        self, message: str, *, field: str | None = None, code: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}


class InvalidRequest(ToolqError):
    status, code = 422, "invalid_request"


class UnknownModel(InvalidRequest):
    code = "unknown_model"


class UnknownTool(InvalidRequest):
    code = "unknown_tool"


class LimitExceeded(InvalidRequest):
    """A value above a cap the operator set (max_tokens, max_iterations, messages, timeout)."""

    code = "limit_exceeded"


class UnknownToolCall(InvalidRequest):
    """An answer names a tool call the paused job does not wait on."""

    code = "unknown_tool_call"


class WrongActionKind(InvalidRequest):
    """A tool result for a call that waits on an approval, or an approval for a client tool's call."""

    code = "wrong_action_kind"


class BadRequest(ToolqError):
    status, code = 400, "bad_request"


class Unauthorized(ToolqError):
    status, code = 401, "unauthorized"


class Forbidden(ToolqError):
    """A request the gateway will not serve from where it came (a foreign ``Origin``)."""

    status, code = 403, "forbidden"


class MisdirectedRequest(ToolqError):
    """A ``Host`` the gateway does not serve (an open gateway serves only its own names)."""

    status, code = 421, "misdirected_request"


class UnsupportedMediaType(ToolqError):
    """A POST body that is not JSON, where only JSON is taken."""

    status, code = 415, "unsupported_media_type"


class TooManyWrongKeys(ToolqError):
    """Too many wrong keys from one client address in the window (gateway/wrong_keys.py): a 429
    with Retry-After, whatever key comes next from there until the window ends."""

    status, code = 429, "too_many_wrong_keys"

    def __init__(self, message: str, *, retry_after_s: int, **kw: Any):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)}, **kw)
        self.retry_after_s = retry_after_s


class NotFound(ToolqError):
    status, code = 404, "not_found"


class JobNotFoundError(NotFound):
    """No such job for this caller: never created, expired, or another tenant's (all look alike)."""

    code = "job_not_found"

    @classmethod
    def of(cls, job_id: str) -> JobNotFoundError:
        """The one wording every front door uses for a job it cannot show."""
        return cls(f"job {job_id!r} not found", field="job_id")


class ThreadNotFoundError(NotFound):
    """No such thread for this caller (never created, expired, deleted, or another tenant's)."""

    code = "thread_not_found"


class Conflict(ToolqError):
    """The job is not in a state that allows this (HTTP 409); the job is unchanged."""

    status, code = 409, "conflict"


class AlreadyAnswered(Conflict):
    code = "already_answered"


class NotPaused(Conflict):
    """Answers for a job that is queued or running (it waits on nobody)."""

    code = "not_paused"


class JobAlreadyEnded(Conflict):
    code = "job_ended"


class RunActive(Conflict):
    """A run on a thread with multitask_strategy ``reject`` while another run is active."""

    code = "run_active"


class EventsGone(ToolqError):
    """The events a follower asked for were trimmed from the job's log (its stream keeps about
    the last ``JobStore.stream_maxlen`` events): they can never be sent. The message names the missing range."""

    status, code = 410, "events_gone"


class EventsPastEnd(ToolqError):
    """A start point (``Last-Event-ID`` or ``after``) past the job's last event: no event the job has
    written could have carried it, and following from there would skip what comes next."""

    status, code = 416, "events_past_end"


class BodyTooLarge(ToolqError):
    status, code = 413, "body_too_large"


class QueueFull(ToolqError):
    status, code = 429, "queue_full"

    def __init__(self, message: str, *, retry_after_s: int, **kw: Any):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)}, **kw)
        self.retry_after_s = retry_after_s


class BudgetExhausted(QueueFull):
    """A tenant's token budget for the current window is spent: a 429 naming the budget."""

    code = "budget_exhausted"

    def __init__(self, message: str, *, budget: str, retry_after_s: int, **kw: Any):
        kw.pop("field", None)
        super().__init__(message, retry_after_s=retry_after_s, field=budget, **kw)
        self.budget = budget  # tokens_per_minute | tokens_per_day: the error's field


class StoreQuotaExceeded(ToolqError):
    """A tenant holds its quota of bytes in the job store (store/byte_quota.py): a 429 that names
    the quota and what the tenant holds. It is not retried: the tenant frees bytes (deletes
    threads or files) or waits for its finished jobs to expire."""

    status, code = 429, "store_quota_exceeded"


class TooManyFollowers(QueueFull):
    """A tenant already follows as many job event streams on this gateway as its cap allows."""

    code = "too_many_followers"


class Unavailable(ToolqError):
    """The service cannot answer now (Redis down, no live worker): retry later."""

    status, code = 503, "unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 5, **kw: Any):
        super().__init__(message, **kw)
        self.headers.setdefault("Retry-After", str(retry_after_s))


class NotReplicatedError(Unavailable):
    """The write is on the Redis primary but not yet on the replicas the operator requires
    (``TOOLQ_REDIS_WAIT_REPLICAS``): a 503 with Retry-After. A submission retried with the same
    idempotency key gets the same job back, acknowledged once it is replicated."""

    code = "not_replicated"

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: Any):
        super().__init__(message, retry_after_s=retry_after_s, **kw)


# For the SDK: the class to raise for an error code read from a gateway answer.
BY_CODE: dict[str, type[ToolqError]] = {
    cls.code: cls
    for cls in (
        StoreQuotaExceeded,
        InvalidRequest,
        UnknownModel,
        UnknownTool,
        LimitExceeded,
        BadRequest,
        Unauthorized,
        Forbidden,
        MisdirectedRequest,
        UnsupportedMediaType,
        NotFound,
        JobNotFoundError,
        UnknownToolCall,
        WrongActionKind,
        Conflict,
        AlreadyAnswered,
        NotPaused,
        JobAlreadyEnded,
        ThreadNotFoundError,
        RunActive,
        EventsGone,
        EventsPastEnd,
        BodyTooLarge,
        QueueFull,
        BudgetExhausted,
        TooManyWrongKeys,
        TooManyFollowers,
        Unavailable,
        NotReplicatedError,
    )
}


def from_response(status: int, body: Any, headers: dict[str, str] | None = None) -> ToolqError:
    """Rebuild the exception a gateway answer stands for."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return ToolqError(f"HTTP {status}: {body!r}"[:500], code="http_error")
    code, message = str(err.get("code", "http_error")), str(err.get("message", ""))
    cls = BY_CODE.get(code, ToolqError)
    if cls is TooManyWrongKeys:
        retry = (headers or {}).get("retry-after", "1")
        return TooManyWrongKeys(message, retry_after_s=int(retry) if retry.isdigit() else 1, field=err.get("field"))
    if cls is QueueFull or cls is BudgetExhausted or cls is TooManyFollowers:
        retry = (headers or {}).get("retry-after", "1")
        retry_s = int(retry) if retry.isdigit() else 1
        if cls is BudgetExhausted:
            return BudgetExhausted(message, budget=str(err.get("field") or ""), retry_after_s=retry_s)
        if cls is TooManyFollowers:
            return TooManyFollowers(message, retry_after_s=retry_s, field=err.get("field"))
        return QueueFull(message, retry_after_s=retry_s, field=err.get("field"))
    exc = cls(message, field=err.get("field"), code=code)
    exc.status = status
    return exc


class CommandError(Exception):
    """Input a `toolq` command cannot work with (a bad flag, setting or file). The CLI front
    (``toolq/commands/cli.py``) prints the message as one line and exits with status 2; any room's
    command handler may raise it without importing the CLI."""
