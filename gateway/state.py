"""What one gateway process holds, built at startup and reached by the routes through the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, cast

from fastapi import Depends, Request

from gateway.fleet import FleetView
from gateway.followers import Seats
from gateway.metrics import EventObserver, GatewayMetrics
from gateway.settings import GatewaySettings
from gateway.wrong_keys import WrongKeys
from store.batches import BatchStore
from store.event_hub import EventHub
from store.files import FileStore
from store.jobstore import JobStore
from toolq.webhooks.settings import WebhookSettings


@dataclass
class GatewayState:
    settings: GatewaySettings
    store: JobStore
    fleet: FleetView
    metrics: GatewayMetrics
    observer: EventObserver
    wrong_keys: WrongKeys  # gateway/wrong_keys.py
    hub: EventHub  # every follower's events (store/event_hub.py)
    seats: Seats  # followers per tenant (gateway/followers.py)
    files: FileStore  # OpenAI's Files API (store/files.py)
    batches: BatchStore  # OpenAI's Batch API (store/batches.py)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)  # toolq/webhooks/settings.py


async def get_state(request: Request) -> GatewayState:
    # async on purpose: FastAPI runs a plain `def` dependency in a worker thread, a thread hop
    # per request for what is an attribute read.
    # Set by the lifespan in gateway/app.py; Starlette's app.state is untyped.
    return cast(GatewayState, request.app.state.toolq)


State = Annotated[GatewayState, Depends(get_state)]  # a route parameter: the gateway's state
