"""Fair shares of the worker fleet: at most MANGO_WORKSPACE_MAX_RUNNING_TURNS runners of one
workspace at once, across every worker process, so that one tenant's burst of turns cannot take
every worker thread while another tenant's turns wait behind it in the queue.

A runner takes a "turns" slot of its workspace (core.caps: a Redis sorted set, refreshed while
held, expiring when its process dies) before it takes the session's lease. A session that finds
its workspace at the cap holds no thread: it is put in the workspace's waiting set (oldest first)
and its task ends. Each runner that ends wakes the oldest waiting session of its workspace. The
taker checks the cap once more after joining the waiting set, so a slot freed in between is not
missed; a wake-up lost to a crash is made good by the reaper (tasks.session_recover_stuck hands
on sessions whose input waits with no runner).
"""

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from django.conf import settings

from core import caps
from core.errors import RateLimited
from sessions.dispatch import session_run_enqueue
from sessions.selectors.runner import session_workspace_id

logger = logging.getLogger(__name__)

KIND = "turns"
# A waiting set nobody touches for this long is dropped (its sessions are recovered by the reaper).
WAITING_TTL_SECONDS = 24 * 3600


def waiting_key(workspace_id: str) -> str:
    return f"mango:turns-waiting:{workspace_id}"


@contextmanager
def turn_slot(*, session_id: str) -> Iterator[bool]:
    """Yields True while this runner holds one of its workspace's turn slots (or no cap applies);
    False when the workspace is at its cap and the session now waits to be woken."""
    limit = settings.MANGO_WORKSPACE_MAX_RUNNING_TURNS
    workspace_id = session_workspace_id(session_id=session_id) if limit > 0 else None
    if workspace_id is None:  # no cap, or an unknown session (the run does nothing)
        yield True
        return
    gate = caps.thread_gate()
    admitted, slot = _take_or_wait(gate, workspace_id=workspace_id, session_id=session_id, limit=limit)
    if not admitted:
        logger.info("workspace at its running-turns cap; session waits", extra={"session_id": session_id})
        yield False
        return
    held = _Held(gate=gate, slot=slot, workspace_id=workspace_id, limit=limit)
    _current.held = held
    try:
        yield True
    finally:
        _current.held = None
        gate.release(held.slot)
        _wake_next(gate.redis, workspace_id=workspace_id)


@dataclass
class _Held:
    gate: caps.ThreadGate
    slot: caps.Slot | None
    workspace_id: str
    limit: int


_current = threading.local()  # the slot this thread's runner holds (turn_slot), if any


@contextmanager
def turn_slot_lent() -> Iterator[None]:
    """While a coordinator waits for its threads, its turn slot is free for them: released (the
    workspace's oldest waiting session woken) for the wait, taken back after. Without it a
    workspace whose every slot is a waiting coordinator would never run their threads. Taken
    back over the cap when the threads filled it: the coordinator then finishes its turn without
    a slot (an overshoot bounded by the coordinators that waited)."""
    held = getattr(_current, "held", None)
    if held is None or held.slot is None:
        yield
        return
    held.gate.release(held.slot)
    held.slot = None
    _wake_next(held.gate.redis, workspace_id=held.workspace_id)
    try:
        yield
    finally:
        try:
            held.slot = held.gate.take(kind=KIND, workspace_id=held.workspace_id, limit=held.limit)
        except RateLimited:
            logger.info("a coordinator's threads filled its workspace's turn slots; it finishes without one")


def _take_or_wait(gate: caps.ThreadGate, *, workspace_id: str, session_id: str, limit: int):
    try:
        return True, gate.take(kind=KIND, workspace_id=workspace_id, limit=limit)
    except RateLimited:
        pass
    key = waiting_key(workspace_id)
    try:
        with gate.redis.pipeline() as pipe:
            pipe.zadd(key, {session_id: time.time()}, nx=True).expire(key, WAITING_TTL_SECONDS).execute()
    except (redis.RedisError, OSError):
        logger.warning("could not queue a session behind its workspace's cap; running it")
        return True, None
    try:
        slot = gate.take(kind=KIND, workspace_id=workspace_id, limit=limit)
    except RateLimited:
        return False, None  # a runner of this workspace wakes it when it ends
    _forget(gate.redis, key, session_id)
    return True, slot


def _forget(client: redis.Redis, key: str, session_id: str) -> None:
    try:
        client.zrem(key, session_id)
    except (redis.RedisError, OSError):
        logger.warning("could not take a session out of its waiting set; a later wake-up is harmless")


def _wake_next(client: redis.Redis, *, workspace_id: str) -> None:
    try:
        popped = client.zpopmin(waiting_key(workspace_id), 1)
    except (redis.RedisError, OSError):
        logger.warning("could not wake a waiting session; the reaper will")
        return
    for member, _ in popped:
        session_run_enqueue(session_id=member.decode() if isinstance(member, bytes) else member)
