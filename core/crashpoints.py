"""Fault injection for the crash tests and the crash campaign (bench/crash_campaign.py).

`crash_point("name")` is inert unless MANGO_TEST_CRASH_POINT selects that point:

* `name`     — the first time this process reaches it;
* `name@N`   — the Nth time (1-based) this process reaches it (points inside loops).

It then does what MANGO_TEST_CRASH_ACTION says: `kill` (default) SIGKILLs the process, exactly
like `kill -9`; `hang` blocks the calling thread forever, so that a test can kill the whole
server (every process) while the operation is provably at that point.
"""

import os
import signal
import threading
import time
from collections import Counter

ENV_POINT = "MANGO_TEST_CRASH_POINT"
ENV_ACTION = "MANGO_TEST_CRASH_ACTION"

_hits: Counter = Counter()
_lock = threading.Lock()


def _selected(spec: str, name: str) -> bool:
    target, _, nth = spec.partition("@")
    if target != name:
        return False
    with _lock:
        _hits[name] += 1
        count = _hits[name]
    return count == (int(nth) if nth else 1)


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV_POINT)
    if not spec or not _selected(spec, name):
        return
    if os.environ.get(ENV_ACTION) == "hang":
        # Announce where we stopped (tests wait for this line), then block this thread only.
        print(f"crash point reached: {name} pid {os.getpid()}", flush=True)
        while True:
            time.sleep(3600)
    os.kill(os.getpid(), signal.SIGKILL)
