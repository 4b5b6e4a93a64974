"""The gateway's loop seen from outside: a process of its own that asks ``/healthz`` every 50 ms
and prints its slowest answer in ms when its stdin closes.

Its own process, because a probe in the soak's process shared that process's loop and GIL with
the hostile sender, which builds and encodes megabyte bodies: the sender's own work was counted
as the gateway's stall.

Run: python -m tests.support.healthz_probe URL   (close stdin to stop)
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx

from tests.support.processes import REPO


def main(url: str) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    worst = 0.0
    with httpx.Client(base_url=url, timeout=60) as probe:
        while not stop.is_set():
            t0 = time.perf_counter()
            probe.get("/healthz")
            worst = max(worst, time.perf_counter() - t0)
            time.sleep(0.05)
    print(int(worst * 1000), flush=True)


class HealthzProbe:
    """``with HealthzProbe(url) as p: ...`` then ``p.worst_ms``."""

    def __init__(self, url: str):
        self.url = url
        self.worst_ms = 0

    def __enter__(self) -> HealthzProbe:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.healthz_probe", self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        out, _ = self.proc.communicate(input="", timeout=120)
        self.worst_ms = int(out.strip() or 0)


if __name__ == "__main__":
    main(sys.argv[1])
