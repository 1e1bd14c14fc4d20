"""Readiness checks, registered by each app in its AppConfig.ready(): `core` owns PostgreSQL,
Redis and the Celery workers, `files` owns the object store. `/readyz` runs them all and never
imports another app."""

from collections.abc import Callable

# name -> callable raising when the dependency is not usable; registration order is report order.
_checks: dict[str, Callable[[], None]] = {}


def register(name: str, check: Callable[[], None]) -> None:
    _checks[name] = check


def run_checks() -> tuple[dict[str, str], list[str]]:
    """Every registered check: ({name: "ok" | "down: Reason"}, [names that are down])."""
    results, down = {}, []
    for name, check in _checks.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 — readiness reports, never raises
            reason = str(exc) if isinstance(exc, NotReady) else type(exc).__name__
            results[name] = f"down: {reason}"
            down.append(name)
    return results, down


class NotReady(Exception):
    """A check's own finding (its message is shown), as opposed to an unreachable dependency."""


def check_database() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def check_redis() -> None:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def check_celery_worker() -> None:
    """A worker consuming the sessions queue renewed its heartbeat recently (core/heartbeats.py)."""
    from django.conf import settings

    from core import heartbeats

    if not settings.MANGO_READYZ_REQUIRE_WORKER:
        return
    if not heartbeats.live_workers(queue=settings.MANGO_SESSIONS_QUEUE):
        raise NotReady(
            f"no Celery worker on queue {settings.MANGO_SESSIONS_QUEUE!r} "
            f"answered in the last {settings.MANGO_HEARTBEAT_STALE_SECONDS}s"
        )
