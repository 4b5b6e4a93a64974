"""Answers to a paused job (status ``requires_action``): the results of client-executed tools and
the decisions on calls that need approval. Once every call the job waits on is answered it is
queued again and resumes from its checkpoint (store/lua/answer.lua)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from gateway.auth import Tenant
from gateway.budgets import counted
from gateway.jobs import JobId, owned
from gateway.state import GatewayState, State
from gateway.submission import queue_full
from store.jobstore import JobNotFound, QueueAtLimit
from toolq.errors import BudgetExhausted, JobNotFoundError
from toolq.wire.api import ApprovalDecision, ErrorBody, JobView, ToolResult
from toolq.wire.limits import MAX_ANSWERS
from toolq.wire.protocol import ActionKind

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 404, 409, 413, 422, 429)}


@router.post("/{job_id}/tool_results", response_model=JobView, responses=_ERRORS)
async def post_tool_results(
    job_id: JobId,
    results: Annotated[list[ToolResult], Body(min_length=1, max_length=MAX_ANSWERS)],
    tenant: Tenant,
    state: State,
) -> JobView:
    """Post the results of client-executed tool calls, as ``[{tool_call_id, content, is_error?}]``.

    Calls may be answered over several posts; the job resumes once none is missing. 409 when a
    call was already answered or the job is not paused (or has ended); 422 for a call the job
    does not wait on, or one that waits on an approval instead; 429 ``queue_full`` (with
    Retry-After) when the answers would resume the job and the queue bounds refuse it, as they
    would a new job, or 429 ``budget_exhausted`` when its tenant's token budget has no room:
    nothing is recorded, post them again."""
    return await answer_calls(state, tenant, job_id, [(r.tool_call_id, r.answer()) for r in results], "client")


@router.post("/{job_id}/approvals", response_model=JobView, responses=_ERRORS)
async def post_approvals(
    job_id: JobId,
    decisions: Annotated[list[ApprovalDecision], Body(min_length=1, max_length=MAX_ANSWERS)],
    tenant: Tenant,
    state: State,
) -> JobView:
    """Approve or deny calls that need approval, as ``[{tool_call_id, approved, reason?}]``.

    Approved calls run when the job resumes; a denied call's tool response tells the model it was
    refused, quoting the reason. Errors as for tool_results."""
    return await answer_calls(state, tenant, job_id, [(d.tool_call_id, d.answer()) for d in decisions], "approval")


async def answer_calls(
    state: GatewayState, tenant: str, job_id: str, answers: list[tuple[str, dict[str, Any]]], kind: ActionKind
) -> JobView:
    """Record the answers to ``tenant``'s paused job (the dashboard's too: gateway/ui/api.py)."""
    if await state.store.owner(job_id) != tenant:  # one field, not the record: it is read once answered
        raise JobNotFoundError.of(job_id)
    try:
        await state.store.answer_actions(job_id, answers, kind, tenant=tenant)
        return (await owned(state, job_id, tenant)).view()
    except JobNotFound:
        raise JobNotFoundError.of(job_id) from None
    except QueueAtLimit as e:  # the resumed attempt meets a new job's admission (store/admission.py)
        raise queue_full(e, tenant, state) from None
    except BudgetExhausted as e:  # and its budgets (store/budget_holds.py)
        raise counted(state, tenant, e) from None
