"""Liveness of Celery processes, as Redis keys with a TTL that the processes themselves renew.

A worker writes `mango:heartbeat:worker:<queue>:<hostname>` for each queue it consumes, and
beat writes `mango:heartbeat:beat`, every MANGO_HEARTBEAT_SECONDS from a timer thread in the
process's main process (started by the worker_ready / beat_init signals, config/celery.py).
A key expires MANGO_HEARTBEAT_STALE_SECONDS after its last renewal: no key means no process
has answered recently. `/readyz` requires a live worker on the sessions queue; the admin
dashboard lists the workers and the age of beat's last heartbeat.
"""

import json
import logging
import threading
import time

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

WORKER_PREFIX = "mango:heartbeat:worker:"
BEAT_KEY = "mango:heartbeat:beat"


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)


def _worker_key(queue: str, hostname: str) -> str:
    return f"{WORKER_PREFIX}{queue}:{hostname}"


def worker_beat(*, hostname: str, queues: list[str]) -> None:
    value = json.dumps({"hostname": hostname, "queues": queues, "ts": time.time()})
    client = _client()
    try:
        with client.pipeline() as pipe:
            for queue in queues:
                pipe.set(_worker_key(queue, hostname), value, ex=settings.MANGO_HEARTBEAT_STALE_SECONDS)
            pipe.execute()
    finally:
        client.close()


def worker_gone(*, hostname: str, queues: list[str]) -> None:
    client = _client()
    try:
        client.delete(*[_worker_key(queue, hostname) for queue in queues])
    finally:
        client.close()


def beat_beat() -> None:
    client = _client()
    try:
        client.set(BEAT_KEY, json.dumps({"ts": time.time()}), ex=settings.MANGO_HEARTBEAT_STALE_SECONDS)
    finally:
        client.close()


def live_workers(*, queue: str = "*", since_server_start: bool = False) -> list[dict]:
    """Workers that renewed their heartbeat within the stale window (one entry per hostname);
    with since_server_start, only heartbeats written since the Redis server last started (one
    restored from before a restart proves nothing about the worker's connection now)."""
    client = _client()
    try:
        keys = list(client.scan_iter(match=f"{WORKER_PREFIX}{queue}:*", count=500))
        values = client.mget(keys) if keys else []
        started = time.time() - int(client.info("server")["uptime_in_seconds"]) - 1 if since_server_start else 0
    finally:
        client.close()
    workers: dict[str, dict] = {}
    for raw in values:
        if raw:
            entry = json.loads(raw)
            if entry["ts"] >= started:
                workers[entry["hostname"]] = entry
    now = time.time()
    return [
        {**entry, "age_seconds": now - entry["ts"]} for entry in sorted(workers.values(), key=lambda e: e["hostname"])
    ]


def beat_age_seconds() -> float | None:
    client = _client()
    try:
        raw = client.get(BEAT_KEY)
    finally:
        client.close()
    return time.time() - json.loads(raw)["ts"] if raw else None


class Heartbeat:
    """A daemon thread calling `beat()` every MANGO_HEARTBEAT_SECONDS until stopped. A failed
    beat (Redis down) is logged and retried at the next tick."""

    def __init__(self, beat, *, name: str):
        self._beat = beat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "Heartbeat":
        """The first beat happens here, so the process is visible once it says it is ready."""
        self._beat_once()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def beat_now(self) -> None:
        """Beat at once, off the caller's thread (e.g. a worker that has just reconnected)."""
        threading.Thread(target=self._beat_once, name="mango-heartbeat-now", daemon=True).start()

    def _beat_once(self) -> None:
        try:
            self._beat()
        except Exception:
            logger.warning("heartbeat failed", exc_info=True)

    def _run(self) -> None:
        while not self._stop.wait(settings.MANGO_HEARTBEAT_SECONDS):
            self._beat_once()
