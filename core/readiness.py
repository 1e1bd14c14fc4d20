"""Readiness checks, registered by each app in its AppConfig.ready(): `core` owns PostgreSQL,
Redis and the Celery workers, `files` owns the object store. `/readyz` runs them all and never
imports another app.

The checks run at once, each on a thread of its own, and /readyz answers within
MANGO_READYZ_TIMEOUT_SECONDS whatever hangs: a check that has not answered by then is reported
down ("no answer within …"). A hung check keeps its thread, and the next probe waits on that same
attempt instead of starting another, so a dependency that hangs costs one thread per check."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from django.conf import settings

# name -> callable raising when the dependency is not usable; registration order is report order.
_checks: dict[str, Callable[[], None]] = {}
_running: dict[str, Future] = {}
_running_lock = threading.Lock()


def register(name: str, check: Callable[[], None]) -> None:
    _checks[name] = check


class NotReady(Exception):
    """A check's own finding (its message is shown), as opposed to an unreachable dependency."""


def _start(name: str, check: Callable[[], None]) -> Future:
    """The check's attempt in flight, or a new one on a thread of its own."""
    with _running_lock:
        future = _running.get(name)
        if future is not None and not future.done():
            return future
        future = _running[name] = Future()

    def run():
        try:
            check()
        except BaseException as exc:  # noqa: BLE001 — reported, never raised
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(target=run, name=f"mango-readyz-{name}", daemon=True).start()
    return future


def run_checks(*, timeout: float | None = None) -> tuple[dict[str, str], list[str]]:
    """Every registered check: ({name: "ok" | "down: Reason"}, [names that are down]), within
    `timeout` seconds (default MANGO_READYZ_TIMEOUT_SECONDS)."""
    timeout = settings.MANGO_READYZ_TIMEOUT_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + timeout
    futures = {name: _start(name, check) for name, check in _checks.items()}
    results, down = {}, []
    for name, future in futures.items():
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
            results[name] = "ok"
        except TimeoutError:
            results[name] = f"down: no answer within {timeout:g}s"
            down.append(name)
        except Exception as exc:  # noqa: BLE001 — readiness reports, never raises
            reason = str(exc) if isinstance(exc, NotReady) else type(exc).__name__
            results[name] = f"down: {reason}"
            down.append(name)
    return results, down


def check_database() -> None:
    """A new connection of its own (not the request pool's, whose wait is the request timeout)."""
    from core.database import database_connect

    conn = database_connect(connect_timeout=2)
    try:
        conn.execute("SELECT 1")
    finally:
        conn.close()


def check_redis() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def check_celery_worker() -> None:
    """A worker consuming the sessions queue renewed its heartbeat recently (core/heartbeats.py),
    while connected to this Redis server's current run (a heartbeat from before Redis restarted
    does not say the worker has reconnected)."""
    from core import heartbeats

    if not settings.MANGO_READYZ_REQUIRE_WORKER:
        return
    if not heartbeats.live_workers(queue=settings.MANGO_SESSIONS_QUEUE, since_server_start=True):
        raise NotReady(
            f"no Celery worker on queue {settings.MANGO_SESSIONS_QUEUE!r} "
            f"answered in the last {settings.MANGO_HEARTBEAT_STALE_SECONDS}s"
        )
