"""A grammar build process: ``python -m worker.grammar.build_process``, started by
worker/grammar/pool.py, never by hand.

It reads a task (a module-level function, its arguments and the budget) from stdin, runs it, and
writes the grammar or the failure to stdout, one at a time, until stdin closes. Frames are an
8-byte length and a pickle; both ends are the same worker, so the pickle is trusted. It runs at a
lower CPU priority than the worker (the decode thread comes first on a busy machine), and it ends
when its worker is gone, even mid-build.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import threading
import time
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")


def write_frame(out: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(HEADER.pack(len(data)) + data)
    out.flush()


def _read_frame(src: BinaryIO) -> Any:
    head = src.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (n,) = HEADER.unpack(head)
    return pickle.loads(src.read(n))


def _orphaned(parent: int) -> None:
    """End this process once its worker is gone (a worker killed mid-build never closes stdin)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def _run(task: tuple[Any, tuple[Any, ...], Any]) -> tuple[str, str]:
    from worker.grammar.budget import use_budget
    from worker.grammar.check import GrammarError
    from worker.grammar.errors import GrammarTooLarge

    func, args, budget = task
    try:
        with use_budget(budget):
            return "ok", func(*args)
    except GrammarTooLarge as e:
        return "too_large", str(e)
    except (GrammarError, RecursionError) as e:
        return "invalid", str(e) or type(e).__name__
    except Exception as e:  # a build that fails is its request's failure, never the process's
        return "invalid", f"{type(e).__name__}: {e}"


def main() -> None:
    nice = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if nice:
        os.nice(nice)
    threading.Thread(target=_orphaned, args=(os.getppid(),), daemon=True).start()
    src, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not break the frames
    import worker.formats
    import worker.grammar.schema_grammar  # noqa: F401

    write_frame(out, ("ready", os.getpid()))
    while (task := _read_frame(src)) is not None:
        write_frame(out, _run(task))


if __name__ == "__main__":
    main()
