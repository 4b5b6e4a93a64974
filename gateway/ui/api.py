"""/ui/api: the dashboard's JSON endpoints and its event stream, every one scoped to the viewer
(gateway/ui/session.py, gateway/ui/access.py).

Bad input is a 4xx in the gateway's one error shape: FastAPI's 422 for a query out of bounds (a
status that is none, a limit above ``MAX_PAGE``), 400 for a cursor no listing wrote, 404 for a job
that does not exist or is another tenant's.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response

from gateway.actions import answer_calls
from gateway.jobs import JobId, cancel_owned
from gateway.sse import MAX_SEQ, events_after, start_seq
from gateway.state import GatewayState, State
from gateway.ui.access import tenant_scope, visible_job
from gateway.ui.session import Sessions, ViewerDep
from gateway.ui.views import (
    Approval,
    JobDetail,
    JobLine,
    JobList,
    LoginBody,
    McpLine,
    Me,
    ModelLine,
    Overview,
    ServiceLine,
    WorkerLine,
)
from gateway.ui.waterfall import waterfall
from store import job_index
from store.jobstore import JobNotFound
from toolq.errors import BadRequest, JobNotFoundError
from toolq.wire.api import ApprovalDecision, CancelView, ErrorBody, JobView, ToolResult
from toolq.wire.limits import MAX_ANSWERS
from toolq.wire.protocol import JobStatus, now_ms

router = APIRouter(prefix="/ui/api", tags=["dashboard"], include_in_schema=False)
login_router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)

_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 404, 409, 422)}
Name = Annotated[str | None, Query(min_length=1, max_length=128)]


@login_router.post("/login", response_model=Me, responses=_ERRORS)
async def login(body: Annotated[LoginBody, Body()], request: Request, response: Response, state: State) -> Me:
    """Exchange an API key or an operator key for the dashboard's session cookie."""
    sessions: Sessions = request.app.state.ui_sessions
    await state.wrong_keys.judge(request, body.key, lambda: sessions.viewer_of_key(body.key))
    viewer = sessions.sign_in(response, request, body.key)
    return Me(tenant=viewer.tenant, operator=viewer.operator, open=False)


@login_router.post("/logout", status_code=204)
async def logout(request: Request) -> Response:
    response = Response(status_code=204)
    Sessions.sign_out(response, request)
    return response


@router.get("/me", response_model=Me, responses=_ERRORS)
async def me(viewer: ViewerDep) -> Me:
    return Me(tenant=viewer.tenant, operator=viewer.operator, open=viewer.open)


def _counter(state: GatewayState, name: str, labels: dict[str, str]) -> int:
    value = state.metrics.registry.get_sample_value(name, labels)
    return int(value or 0)


@router.get("/overview", response_model=Overview, responses=_ERRORS)
async def overview(viewer: ViewerDep, state: State) -> Overview:
    """The fleet now: each model's queue, workers and rates; the workers; tool services; MCP tools."""
    fleet = await state.fleet.get()
    models = []
    for view in await fleet.describe(state.store.redis, fleet.models()):
        workers = fleet.workers_of(view.id)
        finished = sum(
            _counter(state, "toolq_jobs_finished_total", {"model": view.id, "outcome": o})
            for o in ("succeeded", "failed", "cancelled")
        )
        models.append(
            ModelLine(
                id=view.id,
                queue_depth=view.queue_depth,
                workers=view.workers,
                slots=view.slots,
                slots_busy=view.slots_busy,
                decode_tps=round(sum(w.decode_tps for w in workers), 1),
                prefill_tps=round(sum(w.prefill_tps for w in workers), 1),
                jobs_finished=finished,
                tokens_generated=_counter(state, "toolq_tokens_generated_total", {"model": view.id}),
            )
        )
    mcp: dict[str, list[str]] = {}
    lines = []
    for w in sorted(fleet.workers, key=lambda w: (w.model, w.id)):
        mine = sorted(t["function"]["name"] for t in w.tools if t.get("where") == "mcp")
        for name in mine:
            mcp.setdefault(name, []).append(w.id)
        lines.append(
            WorkerLine(
                id=w.id,
                model=w.model,
                host=w.host,
                pid=w.pid,
                gpu=w.gpu,
                busy=w.busy,
                jobs_done=w.jobs_done,
                slots=w.slots,
                slots_busy=w.slots_busy,
                batch_size=w.batch_size,
                decode_tps=w.decode_tps,
                prefill_tps=w.prefill_tps,
                prompt_tokens=w.prompt_tokens,
                cached_tokens=w.cached_tokens,
                format=w.format,
                template=w.template,
                heartbeat_ms=w.heartbeat_ms,
                mcp_tools=mine,
            )
        )
    services = [
        ServiceLine(
            id=i.id,
            tools=sorted(i.tool_names),
            busy=i.busy,
            concurrency=i.concurrency,
            host=i.host,
            pid=i.pid,
            heartbeat_ms=i.heartbeat_ms,
        )
        for i in sorted(fleet.services.instances, key=lambda i: i.id)
    ]
    return Overview(
        now_ms=now_ms(),
        models=models,
        workers=lines,
        services=services,
        mcp=[McpLine(tool=t, workers=ws) for t, ws in sorted(mcp.items())],
    )


@router.get("/jobs", response_model=JobList, responses=_ERRORS)
async def list_jobs(
    viewer: ViewerDep,
    state: State,
    status: Annotated[JobStatus | None, Query()] = None,
    model: Name = None,
    tenant: Name = None,
    q: Annotated[str | None, Query(min_length=1, max_length=128, description="a job id, or a piece of one")] = None,
    quarantined: Annotated[bool | None, Query(description="only jobs quarantined after lost attempts")] = None,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=job_index.MAX_PAGE)] = 50,
) -> JobList:
    """The newest jobs the viewer may see, filtered; ``next_cursor`` reads on to older ones."""
    scope = tenant_scope(viewer, tenant)
    try:
        after = job_index.Cursor.parse(cursor) if cursor else None
    except ValueError as e:
        raise BadRequest(str(e), field="cursor") from None
    found: list[JobLine] = []
    if q and after is None:  # a whole id: that job first, however old
        try:
            rec = await visible_job(state, viewer, q)
            if (scope is None or rec.tenant == scope) and quarantined in (None, rec.quarantined):
                found.append(JobLine.of_record(rec))
        except JobNotFoundError:
            pass
    where = job_index.JobFilter(status=status, model=model, tenant=scope, id_part=q, quarantined=quarantined)
    page = await job_index.recent(state.store.redis, where, limit=limit, cursor=after)
    found += [JobLine.of_row(r) for r in page.rows if not found or r.job_id != found[0].job_id]
    return JobList(jobs=found[:limit], next_cursor=page.next_cursor.text() if page.next_cursor else None)


@router.get("/jobs/{job_id}", response_model=JobDetail, responses=_ERRORS)
async def job_detail(job_id: JobId, viewer: ViewerDep, state: State) -> JobDetail:
    """One job: its record, transcript, result, what it waits on, and its timings as a waterfall."""
    rec = await visible_job(state, viewer, job_id)
    try:
        events = await state.store.events(job_id)
    except JobNotFound:
        raise JobNotFoundError.of(job_id) from None
    request = rec.request
    result = rec.result
    return JobDetail(
        job=JobLine.of_record(rec),
        terminal=rec.terminal,
        seq=rec.seq,
        tools=request.tool_names(),
        request_messages=request.messages,
        transcript=result.messages if result and result.messages else request.messages,
        result=result,
        required_action=rec.required_action,
        usage=result.usage if result else None,
        timings=result.timings if result else None,
        waterfall=waterfall(events),
    )


@router.get("/jobs/{job_id}/events", responses={200: {"content": {"text/event-stream": {}}}, 204: {}, **_ERRORS})
async def job_events(
    job_id: JobId,
    viewer: ViewerDep,
    state: State,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=32)] = None,
):
    """The job's events as Server-Sent Events, as /v1/jobs/{id}/events sends them, for the
    browser's EventSource (which sends the session cookie but cannot send an API key)."""
    start = start_seq(after, last_event_id)
    rec = await visible_job(state, viewer, job_id)
    return await events_after(state, rec, start)


@router.post("/jobs/{job_id}/cancel", response_model=CancelView, responses=_ERRORS)
async def cancel(job_id: JobId, viewer: ViewerDep, state: State) -> CancelView:
    await visible_job(state, viewer, job_id)
    return await cancel_owned(state, job_id)


@router.get("/approvals", response_model=list[Approval], responses=_ERRORS)
async def approvals(
    viewer: ViewerDep,
    state: State,
    limit: Annotated[int, Query(ge=1, le=job_index.MAX_PAGE)] = 100,
) -> list[Approval]:
    """The paused jobs the viewer may see, soonest deadline first, with the calls they wait on."""
    out = []
    for rec in await job_index.paused(state.store.redis, viewer.tenant, limit=limit):
        action = rec.required_action
        if action is not None and action.calls:
            out.append(Approval(job=JobLine.of_record(rec), deadline_ms=action.deadline_ms, calls=action.calls))
    return out


@router.post("/jobs/{job_id}/approvals", response_model=JobView, responses=_ERRORS)
async def approve(
    job_id: JobId,
    decisions: Annotated[list[ApprovalDecision], Body(min_length=1, max_length=MAX_ANSWERS)],
    viewer: ViewerDep,
    state: State,
) -> JobView:
    """Approve or deny calls, as POST /v1/jobs/{id}/approvals (an operator for any tenant)."""
    rec = await visible_job(state, viewer, job_id)
    return await answer_calls(state, rec.tenant, job_id, [(d.tool_call_id, d.answer()) for d in decisions], "approval")


@router.post("/jobs/{job_id}/tool_results", response_model=JobView, responses=_ERRORS)
async def answer(
    job_id: JobId,
    results: Annotated[list[ToolResult], Body(min_length=1, max_length=MAX_ANSWERS)],
    viewer: ViewerDep,
    state: State,
) -> JobView:
    """Answer client-executed tool calls, as POST /v1/jobs/{id}/tool_results."""
    rec = await visible_job(state, viewer, job_id)
    return await answer_calls(state, rec.tenant, job_id, [(r.tool_call_id, r.answer()) for r in results], "client")
