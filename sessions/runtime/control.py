"""Stopping a turn: an interrupt (the Redis flag, confirmed against the event log), the
session's deletion, a lost lease, or the worker draining (a hand-back at the next safe point).
Blocking waits (the upstream call, commands, back-off sleeps) return the thread's database
connection first and poll these, so an interrupt never waits for them and a waiting turn holds
no connection.

One watcher thread per worker process reads the interrupt flags of all its turns in one Redis
round trip every POLL_SECONDS, so hundreds of turns cost no more polling than one; it wakes the
turn's wait for the model as soon as it sees the flag raised."""

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection

from sessions import notify
from sessions.runtime.lease import Lease
from sessions.selectors.runner import session_interrupt_pending, session_is_deleted

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1
# Longest a wait for a blocking call sleeps without looking at the lease (interrupts wake it).
WAKE_SECONDS = 1.0


class Stop(Exception):
    """The turn must stop now: interrupted, session deleted, or lease lost."""


class Handback(Exception):
    """The worker is draining: leave the turn (it is resumed by another worker)."""


draining = threading.Event()


def db_release() -> None:
    """Return this thread's database connection (to the pool) before a blocking wait."""
    if not connection.in_atomic_block:
        connection.close()


class InterruptWatch:
    """The interrupt flags of the process's turns, read together."""

    def __init__(self):
        self._lock = threading.Lock()
        self._flags: dict[str, threading.Event] = {}
        self._counts: dict[str, int] = {}
        # Waits to wake as soon as a session's flag is seen raised (TurnControl.interruptible).
        self._wakers: dict[str, set[threading.Event]] = {}
        # Runners waiting for their client's input (Runner.linger), woken by its input flag.
        self._inputs: dict[str, threading.Event] = {}
        self._thread: threading.Thread | None = None

    def watch(self, session_id: str) -> threading.Event:
        with self._lock:
            self._counts[session_id] = self._counts.get(session_id, 0) + 1
            flag = self._flags.setdefault(session_id, threading.Event())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="mango-interrupts")
                self._thread.start()
        return flag

    def wake_on_flag(self, session_id: str, waker: threading.Event) -> None:
        with self._lock:
            self._wakers.setdefault(session_id, set()).add(waker)

    def unwake(self, session_id: str, waker: threading.Event) -> None:
        with self._lock:
            wakers = self._wakers.get(session_id, set())
            wakers.discard(waker)
            if not wakers:
                self._wakers.pop(session_id, None)

    def wake_on_input(self, session_id: str, waker: threading.Event) -> None:
        with self._lock:
            self._inputs[session_id] = waker

    def unwake_input(self, session_id: str) -> None:
        with self._lock:
            self._inputs.pop(session_id, None)

    def unwatch(self, session_id: str) -> None:
        with self._lock:
            self._counts[session_id] -= 1
            if not self._counts[session_id]:
                del self._counts[session_id]
                del self._flags[session_id]

    def _run(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            with self._lock:
                watched = list(self._flags.items())
                inputs = list(self._inputs.items())
            if not watched:
                continue
            keys = [notify.interrupt_key(session_id) for session_id, _ in watched]
            try:
                flagged = notify.flags(keys + [notify.input_key(session_id) for session_id, _ in inputs])
            except Exception:
                logger.exception("reading interrupt flags failed")
                continue
            for (_, waker), is_set in zip(inputs, flagged[len(watched) :], strict=True):
                if is_set:
                    waker.set()
            flagged = flagged[: len(watched)]
            for (session_id, flag), is_set in zip(watched, flagged, strict=True):
                if is_set:
                    flag.set()
                    with self._lock:
                        wakers = list(self._wakers.get(session_id, ()))
                    for waker in wakers:
                        waker.set()
                else:
                    flag.clear()


watch = InterruptWatch()


class _CallPool:
    """The worker process's one pool for blocking calls made interruptible (model requests,
    grader calls): two threads per turn slot, so calls a stop abandoned (they end when their
    stream is closed) never make a live turn's call wait. Created on first use; a forked child
    starts with none (the parent's threads do not exist there)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(self, call: Callable[[], object]) -> concurrent.futures.Future:
        with self._lock:
            if self._executor is None:
                workers = max(4, 2 * settings.CELERY_WORKER_CONCURRENCY)
                self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="mango-call")
            return self._executor.submit(call)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._executor = None


calls = _CallPool()
os.register_at_fork(after_in_child=calls._forget)


class TurnControl:
    def __init__(self, *, session_id: str, lease: Lease):
        self.session_id = session_id
        self.lease = lease
        self.flag = watch.watch(session_id)

    def close(self) -> None:
        watch.unwatch(self.session_id)

    @property
    def lease_lost(self) -> bool:
        return self.lease.lost

    def should_stop(self) -> bool:
        if self.lease.lost:
            return True
        if not self.flag.is_set():
            return False
        try:
            return session_interrupt_pending(session_id=self.session_id) or session_is_deleted(
                session_id=self.session_id
            )
        finally:
            db_release()

    def check_stop(self) -> None:
        if self.should_stop():
            raise Stop()

    def check_handback(self) -> None:
        """At a safe point (no tool use open, no call in flight): leave if the worker drains."""
        if draining.is_set():
            raise Handback()

    def check_deleted(self) -> None:
        if session_is_deleted(session_id=self.session_id):
            raise Stop()

    def interruptible(
        self,
        call: Callable[[], object],
        on_abandon: Callable[[], None] | None = None,
        *,
        tick: Callable[[], None] | None = None,
        tick_seconds: float = 0.0,
    ):
        """Run a blocking call in a helper thread so an interrupt need not wait for it. The
        waiting thread sleeps until the call ends or the watcher sees the session's interrupt
        flag raised (no polling; a lost lease is seen within WAKE_SECONDS). `tick`, if given,
        runs on this thread every `tick_seconds` while the call lasts (a heartbeat)."""
        db_release()
        woken = threading.Event()
        watch.wake_on_flag(self.session_id, woken)
        try:
            future = calls.submit(call)
            future.add_done_callback(lambda _: woken.set())
            next_tick = time.monotonic() + tick_seconds
            while True:
                woken.wait(min(WAKE_SECONDS, tick_seconds) if tick is not None else WAKE_SECONDS)
                woken.clear()
                if future.done():
                    return future.result()
                if tick is not None and time.monotonic() >= next_tick:
                    tick()
                    db_release()
                    next_tick = time.monotonic() + tick_seconds
                try:
                    self.check_stop()
                except Stop:
                    if on_abandon is not None:
                        on_abandon()
                    raise
        finally:
            watch.unwake(self.session_id, woken)

    def sleep(self, seconds: float) -> None:
        db_release()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_stop()
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
