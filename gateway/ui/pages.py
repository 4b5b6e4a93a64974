"""/ui: the dashboard's pages and its static files (gateway/ui/static, gateway/ui/templates).

A page is a shell: the templates hold no job data, and the page's script (static/app.js, on the
vendored Alpine.js and uPlot: static/vendor/VENDORED.md) reads everything from /ui/api and the
job's event stream, showing untrusted text (prompts, tool arguments, model output) as text only.
A page asked for without a session sends the browser to the sign-in page.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.staticfiles import StaticFiles

from gateway.ui.session import current_viewer
from toolq.errors import Unauthorized

router = APIRouter(prefix="/ui", include_in_schema=False)

_templates = Environment(loader=PackageLoader("gateway.ui", "templates"), autoescape=select_autoescape(["html"]))

# Scripts and styles from this origin only. Alpine.js evaluates its attribute expressions with
# Function(), hence 'unsafe-eval'; no inline script runs. Styles set from scripts (bar widths,
# uPlot's canvas) need 'unsafe-inline' for style.
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def static_files() -> StaticFiles:
    """The dashboard's scripts and styles, from the installed package (mounted at /ui/static)."""
    return StaticFiles(packages=[("gateway.ui", "static")])


def _page(name: str, title: str, **context: str) -> HTMLResponse:
    html = _templates.get_template(name).render(title=title, **context)
    return HTMLResponse(html, headers=_HEADERS)


async def _signed_in(request: Request) -> bool:
    try:
        await current_viewer(request)
    except Unauthorized:
        return False
    return True


async def _shell(request: Request, name: str, title: str, **context: str) -> Response:
    if not await _signed_in(request):
        return RedirectResponse("/ui/login", status_code=303)
    return _page(name, title, page=name.removesuffix(".html"), **context)


@router.get("")
@router.get("/")
async def overview_page(request: Request) -> Response:
    return await _shell(request, "overview.html", "Overview")


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    return await _shell(request, "jobs.html", "Jobs")


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    return await _shell(request, "job.html", "Job", job_id=job_id[:128])


@router.get("/approvals")
async def approvals_page(request: Request) -> Response:
    return await _shell(request, "approvals.html", "Approvals")


@router.get("/batches")
async def batches_page(request: Request) -> Response:
    return await _shell(request, "batches.html", "Batches")


@router.get("/login")
async def login_page(request: Request) -> Response:
    return _page("login.html", "Sign in", page="login")
