"""The effects soak's sink (bench/chaos_effects.py): an HTTP server in a process of its own that
receives keyed effects and counts them, as an external system would.

``POST /effect`` with ``{"key", "marker", "tool", "pid"}`` records one effect. ``GET /counts``
answers what a deduplicating sink holds (one effect per key: ``per_key`` has each key's
deliveries) and what a sink that does not deduplicate would have received (``raw``), with the
latest deliveries (``recent``: tool, pid, unix time) so the soak can kill the process that is in
the middle of a tool.

Run: python -m tests.support.effect_sink  (prints the port it listens on, then serves)
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

SINK_ENV = "TOOLQ_EFFECT_SINK_URL"  # where the effect tools send (tests/support/effect_tools.py)

_lock = threading.Lock()
_per_key: Counter[str] = Counter()
_recent: deque[tuple[str, int, float]] = deque(maxlen=64)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        with _lock:
            _per_key[str(body["key"])] += 1
            _recent.append((str(body.get("tool", "?")), int(body.get("pid", 0)), time.time()))
        self._answer({"ok": True})

    def do_GET(self) -> None:
        with _lock:
            out = {"raw": sum(_per_key.values()), "per_key": dict(_per_key), "recent": list(_recent)}
        self._answer(out)

    def _answer(self, data: Any) -> None:
        text = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None


def send_effect(tool: str, key: str, marker: str) -> None:
    """One effect to the sink named by ``$TOOLQ_EFFECT_SINK_URL`` (a tool's side effect)."""
    body = {"key": key, "marker": marker, "tool": tool, "pid": os.getpid()}
    httpx.post(os.environ[SINK_ENV] + "/effect", json=body, timeout=10.0).raise_for_status()


def counts(url: str) -> dict[str, Any]:
    return dict(httpx.get(url + "/counts", timeout=10.0).json())


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
