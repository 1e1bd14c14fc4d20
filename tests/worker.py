"""A real Celery worker subprocess for integration tests (sessions, outputs, …).

    worker = CeleryWorker(env={...}).start()   # waits until the worker is ready
    worker.kill()                              # SIGKILL the whole process group (a crash)
    worker.stop()                              # graceful

It connects to the pytest test database (DATABASE_URL built from the live connection settings)
and to the tests' dedicated Redis database (REDIS_URL from settings, /14 under pytest), and
consumes only this run's sessions queue (tests/sessions/conftest.py sets MANGO_SESSIONS_QUEUE to
one per pytest process), so neither a developer's worker nor a concurrent test run steals tasks.
Logs go to var/log/test-worker-<n>.log.
"""

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count(1)
# Short enough that the recovery test does not wait long; leases renew every eighth of it.
TEST_LEASE_SECONDS = 4
# The workers this process has started and not yet stopped or killed.
LIVE: set["CeleryWorker"] = set()


def pending_session_tasks() -> int:
    """Tasks waiting in this run's sessions queue, when a live worker of this process will run
    them (without one they wait for nobody, and are not counted)."""
    if not any(worker.queues == settings.MANGO_SESSIONS_QUEUE for worker in LIVE):
        return 0
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return client.llen(settings.MANGO_SESSIONS_QUEUE)
    finally:
        client.close()


def test_database_url() -> str:
    cfg = connection.settings_dict
    auth = cfg["USER"] or ""
    if cfg.get("PASSWORD"):
        auth += f":{cfg['PASSWORD']}"
    host = cfg["HOST"] or "127.0.0.1"
    port = cfg["PORT"] or 5432
    return f"postgres://{auth}@{host}:{port}/{cfg['NAME']}"


class CeleryWorker:
    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        concurrency: int = 4,
        queues: str | None = None,
        pool: str = "threads",
        name: str | None = None,
    ):
        self.number = next(_counter)
        self.pool = pool
        self.name = name or f"test-{os.getpid()}-{self.number}"
        self.log_path = ROOT / "var" / "log" / f"test-worker-{os.getpid()}-{self.number}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "DATABASE_CONN_MAX_AGE": "0",
            "MANGO_LOG_LEVEL": "INFO",
            **(env or {}),
        }
        self.concurrency = concurrency
        # Consume only this run's queue (settings.MANGO_SESSIONS_QUEUE unless told otherwise).
        self.queues = queues or settings.MANGO_SESSIONS_QUEUE
        self.env.setdefault("MANGO_SESSIONS_QUEUE", settings.MANGO_SESSIONS_QUEUE)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "CeleryWorker":
        celery = Path(sys.executable).parent / "celery"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 — closed in stop()/kill()
        self.process = subprocess.Popen(
            [
                str(celery), "-A", "config", "worker", "--pool", self.pool, "--concurrency", str(self.concurrency),
                "--loglevel", "INFO", "-Q", self.queues, "--without-gossip", "--without-mingle", "--without-heartbeat",
                "-n", f"{self.name}@%h",
            ],
            cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"celery worker exited early; see {self.log_path}")
            if b" ready." in self.log_path.read_bytes():
                LIVE.add(self)
                return self
            time.sleep(0.1)
        raise RuntimeError(f"celery worker not ready in {timeout}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once: a machine losing the process."""
        LIVE.discard(self)
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._close_log()

    def terminate(self) -> None:
        """SIGTERM to the worker's main process only: a warm shutdown (it drains)."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        LIVE.discard(self)
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log and not log.closed:
            log.close()
