"""What a viewer may see: a tenant its own jobs, an operator every tenant's (gateway/ui/session.py).

Another tenant's job answers exactly as a job that does not exist (404), as on /v1/jobs
(gateway/jobs.py: ``owned``), so a job id tells a tenant nothing about anyone else.
"""

from __future__ import annotations

from gateway.jobs import owned
from gateway.state import GatewayState
from gateway.ui.session import Viewer
from store.jobstore import JobNotFound
from store.records import JobRecord
from toolq.errors import JobNotFoundError, NotFound


async def visible_job(state: GatewayState, viewer: Viewer, job_id: str) -> JobRecord:
    """The job's record when the viewer may see it; else JobNotFoundError (404)."""
    if viewer.tenant is not None:
        return await owned(state, job_id, viewer.tenant)
    try:
        rec = await state.store.record(job_id)
    except JobNotFound:
        rec = None
    if rec is None or not rec.submitted:
        raise JobNotFoundError.of(job_id)
    return rec


def tenant_scope(viewer: Viewer, asked: str | None) -> str | None:
    """The tenant a listing is limited to: a tenant viewer's own whatever it asks (another
    tenant's name is a 404, as if that tenant had no jobs); an operator's choice, or None (all)."""
    if viewer.tenant is None:
        return asked
    if asked is not None and asked != viewer.tenant:
        raise NotFound(f"no tenant {asked!r} among the jobs this key sees", field="tenant")
    return viewer.tenant
