"""Who is asked to deliver after a commit (webhooks.services.kick), so that a burst of events
sends no burst of webhooks.deliver_due tasks.

In this process: its one delivery loop (webhooks.tasks.deliver_due) holds `loop`, and `wanted`
asks it to claim again before it stops; a commit while it runs sets the flag and sends nothing.

Across processes: while a loop runs on a queue it keeps the Redis key `looping` (refreshed every
LOOPING_REFRESH_SECONDS, gone LOOPING_SECONDS after its last refresh), and a commit in a process
without a running loop sets the Redis key `wanted` and sends a task only if no loop holds
`looping`; a loop that stops deletes `looping`, then takes `wanted` (GETDEL) and, if it was set,
claims again. A commit's SET precedes its look at `looping`, and a loop's DEL precedes its
GETDEL: either the loop sees the commit's `wanted`, or the commit sees no `looping` and sends a
task. A loop killed leaves `looping` for at most LOOPING_SECONDS (commits then send nothing, and
beat's webhooks.deliver_due, every MANGO_WEBHOOK_POLL_SECONDS, finds their rows); Redis
unreachable: every commit sends a task, as if no loop ran. Both flags only ask for a claim: the
outbox rows are what is delivered, never lost with a flag."""

import threading
import time

import redis
from django.conf import settings

from core.redis_client import redis_client

LOOPING_SECONDS = 3.0
LOOPING_REFRESH_SECONDS = 1.0

loop = threading.Lock()
wanted = threading.Event()


def _keys() -> tuple[str, str]:
    prefix = f"mango:webhooks:{settings.MANGO_WEBHOOKS_QUEUE}"
    return f"{prefix}:looping", f"{prefix}:wanted"


def wake_running_loop() -> bool:
    """Set this process's flag; whether this process's loop was running, so that it sees it. The
    flag is set before the loop's lock is looked at: a loop that releases after that look checks
    the flag after its release (webhooks.tasks), one that released before it was seen not
    running."""
    wanted.set()
    return loop.locked()


def wake_loop_elsewhere() -> bool:
    """Set the fleet's flag; whether a loop runs on this queue in some process, so that it sees
    it (False when Redis cannot say: the caller sends a task)."""
    looping, wanted_key = _keys()
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.set(wanted_key, b"1", ex=int(LOOPING_SECONDS) + 60)
        pipe.exists(looping)
        return bool(pipe.execute()[1])
    except (redis.RedisError, OSError):
        return False


class Looping:
    """The `looping` key of a running loop: set on start, refreshed by refresh() at most every
    LOOPING_REFRESH_SECONDS, deleted by stop(), which says whether a commit asked for a claim
    meanwhile (the fleet's `wanted`, taken)."""

    def __init__(self):
        self._refreshed = 0.0
        self.refresh(force=True)

    def refresh(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._refreshed < LOOPING_REFRESH_SECONDS:
            return
        self._refreshed = time.monotonic()
        try:
            redis_client().set(_keys()[0], b"1", px=int(LOOPING_SECONDS * 1000))
        except (redis.RedisError, OSError):
            pass  # not known to be looping: commits send tasks

    def stop(self) -> bool:
        looping, wanted_key = _keys()
        try:
            redis_client().delete(looping)
            return redis_client().getdel(wanted_key) is not None
        except (redis.RedisError, OSError):
            return False  # while Redis is down commits send tasks (wake_loop_elsewhere)
