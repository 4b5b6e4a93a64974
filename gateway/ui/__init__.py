"""The dashboard at /ui: pages (pages.py), their JSON endpoints and event stream (api.py), who may
see what (session.py, access.py), a job's waterfall (waterfall.py), and the static files and
templates it ships with (static/, templates/; the vendored libraries: static/vendor/VENDORED.md)."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.auth import KeyRing
from gateway.settings import GatewaySettings
from gateway.ui import api, batches, pages
from gateway.ui.session import Sessions


def install(app: FastAPI, settings: GatewaySettings, ring: KeyRing) -> None:
    """Serve the dashboard from ``app``: its routes, its static files, its session signer."""
    app.state.ui_sessions = Sessions(settings, ring)
    app.include_router(api.login_router)
    app.include_router(api.router)
    app.include_router(batches.router)
    app.include_router(pages.router)
    app.mount("/ui/static", pages.static_files(), name="ui-static")
