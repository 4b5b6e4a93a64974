"""A webhook receiver in a process of its own, for the webhook tests: it verifies every delivery
with the `standardwebhooks` package (the spec's own library, not toolq's code), against each secret
it is given, writes one JSON line per request it receives, and answers by its path:

- ``/ok``: 200 (a query string is not looked at);
- ``/fail/N``: 500 to the first N attempts of each webhook-id, then 200;
- ``/hang-first``: holds the first attempt of each webhook-id for a minute (the test kills the
  sender meanwhile), then 200 to every later one;
- ``/down``: 503 until a POST to ``/_heal`` (not a delivery), then 200.

Run: ``python -m tests.support.webhook_receiver PORT LOG_FILE SECRET [SECRET...]``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

_lock = threading.Lock()
_seen: dict[str, int] = {}
_healed = threading.Event()


def _answer(path: str, n: int) -> int | None:
    """The status to answer the n-th attempt of an id with (None: hold the request)."""
    if path == "/ok":
        return 200
    if path.startswith("/fail/"):
        return 500 if n <= int(path.rsplit("/", 1)[1]) else 200
    if path == "/hang-first":
        return None if n == 1 else 200
    if path == "/down":
        return 200 if _healed.is_set() else 503
    return 404


def make_handler(log_path: str, secrets: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/_heal":
                _healed.set()
                self._reply(200)
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            msg_id = headers.get("webhook-id", "")
            verified = []
            for secret in secrets:
                try:
                    Webhook(secret).verify(body, headers)
                    verified.append(True)
                except WebhookVerificationError:
                    verified.append(False)
            with _lock:
                _seen[msg_id] = n = _seen.get(msg_id, 0) + 1
            status = _answer(self.path.split("?", 1)[0], n)
            record = {
                "path": self.path,
                "host": headers.get("host"),
                "id": msg_id,
                "n": n,
                "timestamp": headers.get("webhook-timestamp"),
                "signatures": headers.get("webhook-signature", "").count("v1,"),
                "verified": verified,
                "status": status,
                "received_at": time.time(),
                "body": json.loads(body) if body else None,
            }
            with _lock, open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if status is None:
                time.sleep(60)
                status = 200
            self._reply(status)

        def _reply(self, status: int) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def main() -> None:
    port, log_path, *secrets = sys.argv[1:]
    server = ThreadingHTTPServer(("127.0.0.1", int(port)), make_handler(log_path, secrets))
    server.daemon_threads = True
    print("receiver ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
