"""A real loopback HTTP receiver, and a real Celery worker and beat for webhook deliveries, on a
queue of this pytest process."""

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings

from tests.worker import ROOT, CeleryWorker, test_database_url

settings.MANGO_WEBHOOKS_QUEUE = f"mango-test-webhooks-{os.getpid()}"

# What the worker and beat of these tests run with: loopback allowed, quick retries.
FAST = {
    "MANGO_WEBHOOKS_QUEUE": settings.MANGO_WEBHOOKS_QUEUE,
    "MANGO_OUTBOUND_PRIVATE_HOSTS": "127.0.0.1",
    "MANGO_WEBHOOK_RETRY_BASE_SECONDS": "0.5",
    "MANGO_WEBHOOK_RETRY_MAX_DELAY_SECONDS": "2",
    "MANGO_WEBHOOK_POLL_SECONDS": "0.5",
    "MANGO_WEBHOOK_LEASE_SECONDS": "3",
    "MANGO_WEBHOOK_TIMEOUT_SECONDS": "2",
    "MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1",
}


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST (headers, body) and answers `status`.
    stop() closes the port (connections refused); start() listens on the same port again."""

    def __init__(self):
        self.received: list[tuple[dict, str]] = []
        self.status = 200
        # Requests whose path contains one of these are answered after slow_seconds.
        self.slow_markers: tuple[str, ...] = ()
        self.slow_seconds = 0.0
        # Requests whose path contains a key are answered with its status instead of `status`.
        self.status_markers: dict[str, int] = {}
        # When each webhook-id first arrived (time.monotonic()).
        self.arrived: dict[str, float] = {}
        self.port = 0
        self._server = None
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
                receiver.arrived.setdefault(self.headers.get("webhook-id", ""), time.monotonic())
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if any(marker in self.path for marker in receiver.slow_markers):
                    time.sleep(receiver.slow_seconds)
                status = next((s for m, s in receiver.status_markers.items() if m in self.path), receiver.status)
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                try:
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sender gave up waiting (its read timeout)

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        ThreadingHTTPServer.daemon_threads = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


class Beat:
    """`celery beat` in a subprocess (webhooks.deliver_due every MANGO_WEBHOOK_POLL_SECONDS)."""

    def __init__(self, env: dict[str, str], schedule: Path):
        log = ROOT / "var" / "log" / f"test-beat-{os.getpid()}.log"
        self._log = open(log, "wb")  # noqa: SIM115 — closed in stop()
        celery = Path(sys.executable).parent / "celery"
        self.process = subprocess.Popen(
            [str(celery), "-A", "config", "beat", "--loglevel", "INFO", "--schedule", str(schedule)],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": test_database_url(), "REDIS_URL": settings.REDIS_URL, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            self.process.wait(10)
        self._log.close()


@pytest.fixture
def delivery_fleet(transactional_db, tmp_path):
    """delivery_fleet(**worker_env): a worker on this run's webhooks queue and a beat;
    `fleet.worker` may be killed and `fleet.start_worker()` starts a successor."""

    class Fleet:
        def __init__(self, concurrency: int = 2, **worker_env):
            self.workers = []
            self.concurrency = concurrency
            self.start_worker(**worker_env)
            self.beat = Beat(FAST, tmp_path / "beat-schedule")

        def start_worker(self, **env) -> CeleryWorker:
            worker = CeleryWorker(
                env={**FAST, **env}, queues=settings.MANGO_WEBHOOKS_QUEUE, concurrency=self.concurrency
            ).start()
            self.workers.append(worker)
            self.worker = worker
            return worker

        def stop(self):
            self.beat.stop()
            for worker in self.workers:
                worker.stop()

    fleets = []

    def make(concurrency: int = 2, **worker_env) -> Fleet:
        fleets.append(Fleet(concurrency, **worker_env))
        return fleets[-1]

    yield make
    for fleet in fleets:
        fleet.stop()


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not true within {timeout}s")


def strict_event(body: str):
    """The body validated strictly (no coercion) against the SDK's BetaWebhookEvent, with no
    field the SDK does not know in the envelope or its data; returns the event."""
    from anthropic.types.beta import BetaWebhookEvent

    event = BetaWebhookEvent.model_validate_json(body, strict=True)
    assert not event.model_extra and not event.data.model_extra, body
    return event
