"""Enqueueing session work by task name, so that services and the runtime never import
sessions.tasks (tasks sit on the top floor and import them). The router sends every sessions.*
task to MANGO_SESSIONS_QUEUE.

A wake-up sent after a commit must not fail the request that committed: the events are stored,
so the answer is theirs. When the queue (Redis) does not take the task, it is kept in this
process's outbox and sent again every OUTBOX_RETRY_SECONDS until the queue answers: the turn
starts within about a second of Redis returning (plus the worker's own reconnect). If the process
dies first, the worker's sweep (sessions.recover_stuck) finds the input still pending."""

import logging
import threading

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

SESSION_RUN = "sessions.run"
SANDBOX_REMOVE = "sessions.sandbox_remove"
SANDBOX_PROXY_REMOVE = "sessions.sandbox_proxy_remove"
SANDBOX_SLEEP = "sessions.sandbox_sleep"
SANDBOX_PATH_REMOVE = "sessions.sandbox_path_remove"

OUTBOX_RETRY_SECONDS = 0.5
# Distinct (task, args) kept at most; beyond it the sweep is the only way back (logged).
OUTBOX_MAX = 10_000
# What a send raises when the broker does not answer (kombu wraps the transport's errors).
QUEUE_ERRORS = (kombu.exceptions.OperationalError, redis.RedisError, OSError)


def route_task(name, args, kwargs, options, task=None, **kw):
    """CELERY_TASK_ROUTES: sessions.* tasks go to settings.MANGO_SESSIONS_QUEUE (read per send)."""
    if name.startswith("sessions."):
        return {"queue": settings.MANGO_SESSIONS_QUEUE}
    return None


def _send(name: str, *args) -> None:
    current_app.send_task(name, args=list(args))


class _Outbox:
    """Tasks the queue did not take, sent again by one daemon thread until it does."""

    def __init__(self):
        self._pending: dict[tuple, None] = {}  # ordered set of (name, *args)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, name: str, *args) -> None:
        with self._lock:
            if len(self._pending) >= OUTBOX_MAX:
                logger.error("outbox full; the sweep will recover this task", extra={"task": name})
                return
            self._pending[(name, *args)] = None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mango-outbox", daemon=True)
                self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            self._wake.wait(OUTBOX_RETRY_SECONDS)
            with self._lock:
                items = list(self._pending)
                if not items:
                    self._thread = None
                    return
            for item in items:
                try:
                    _send(*item)
                except QUEUE_ERRORS:
                    break  # still down: try again at the next tick, in order
                with self._lock:
                    self._pending.pop(item, None)
                logger.info("outbox task sent", extra={"task": item[0]})


outbox = _Outbox()


def _send_or_keep(name: str, *args) -> None:
    try:
        _send(name, *args)
    except QUEUE_ERRORS:
        logger.warning("queue unavailable; task kept in the outbox", extra={"task": name})
        outbox.add(name, *args)


def session_run_enqueue(*, session_id: str) -> None:
    """Wake a runner for the session now. Harmless when one already runs (the lease decides)."""
    _send(SESSION_RUN, session_id)


def session_run_enqueue_soon(*, session_id: str) -> None:
    """Wake a runner now, or through the outbox as soon as the queue answers."""
    _send_or_keep(SESSION_RUN, session_id)


def session_run_enqueue_on_commit(*, session_id: str) -> None:
    """Wake a runner once the current transaction commits (the events it must see are visible).
    Never raises for an unreachable queue: the wake-up then goes through the outbox."""
    transaction.on_commit(lambda: _send_or_keep(SESSION_RUN, session_id))


def sandbox_remove_enqueue(*, session_id: str) -> None:
    """Remove the session's sandbox from a worker (the API never calls Docker); kept in the outbox
    when the queue does not answer."""
    _send_or_keep(SANDBOX_REMOVE, session_id)


def sandbox_remove_enqueue_on_commit(*, session_id: str) -> None:
    """Remove the session's sandbox from a worker (the API never calls Docker) once the current
    transaction commits; kept in the outbox when the queue does not answer."""
    transaction.on_commit(lambda: _send_or_keep(SANDBOX_REMOVE, session_id))


def sandbox_path_remove_enqueue_on_commit(*, session_id: str, ref: str, path: str, tree: bool) -> None:
    """Remove a deleted resource's path from sandbox `ref` from a worker, once this commits."""
    transaction.on_commit(lambda: _send_or_keep(SANDBOX_PATH_REMOVE, session_id, ref, path, tree))


def sandbox_proxy_remove_enqueue(*, session_id: str) -> None:
    """Remove the session's egress proxy from a task (this process could not reach dockerd);
    kept in the outbox when the queue does not answer."""
    _send_or_keep(SANDBOX_PROXY_REMOVE, session_id)


def sandbox_sleep_enqueue(*, session_id: str, countdown: float) -> None:
    """Put the session's sandbox to sleep in `countdown` seconds if it is idle by then (the task
    checks). A lost one is found by the workers' sweep (sessions.runtime.sleep.sandboxes_sweep)."""
    try:
        current_app.send_task(SANDBOX_SLEEP, args=[session_id], countdown=countdown)
    except QUEUE_ERRORS:
        logger.warning("queue unavailable; the sweep will put the sandbox to sleep", extra={"session_id": session_id})
