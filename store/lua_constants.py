"""The fixed parts of the key layout that store/lua/ scripts name with ``-- const`` lines
(store/scripts.py binds each as a Lua local), so every call does not send them again."""

from __future__ import annotations

from store import keys
from store.records import ANSWER_PREFIX

CONSTANTS: dict[str, str | int] = {
    "job_prefix": keys.JOB_PREFIX,
    "fair_prefix": keys.FAIR_PREFIX,
    "running_prefix": keys.RUNNING_PREFIX,
    "usage_prefix": keys.USAGE_PREFIX,
    "budget_held_prefix": keys.BUDGET_HELD_PREFIX,
    "bytes_prefix": keys.TENANT_BYTES_PREFIX,
    "cancel_prefix": keys.CANCEL_PREFIX,
    "thread_prefix": keys.THREAD_PREFIX,
    "worker_prefix": keys.WORKER_PREFIX,
    "answer_prefix": ANSWER_PREFIX,
    "wake_backlog": keys.WAKE_BACKLOG,
}
