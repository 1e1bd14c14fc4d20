import logging
import os
import time

import pytest
import redis
from django.test import Client

from core import heartbeats
from tests.worker import CeleryWorker

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker_queue(settings):
    """A queue of this test's own, so no other worker of the run counts as live on it."""
    settings.MANGO_SESSIONS_QUEUE = f"mango-test-ready-{os.getpid()}-{time.monotonic_ns()}"
    return settings.MANGO_SESSIONS_QUEUE


@pytest.fixture
def live_worker(worker_queue, django_db_blocker):
    with django_db_blocker.unblock():
        worker = CeleryWorker(queues=worker_queue, env={"MANGO_SESSIONS_QUEUE": worker_queue}, concurrency=1).start(
            timeout=90
        )
    yield worker
    worker.stop()


def test_healthz_needs_no_auth():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_all_up(s3_bucket, live_worker):
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"postgresql": "ok", "redis": "ok", "celery_worker": "ok", "object_store": "ok"}


def test_readyz_fails_without_a_live_worker(s3_bucket, worker_queue):
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert "celery_worker" in body["error"]["message"]
    assert worker_queue in body["error"]["details"]["checks"]["celery_worker"]
    assert body["error"]["details"]["checks"]["postgresql"] == "ok"


def test_readyz_fails_once_the_worker_is_gone(s3_bucket, live_worker, worker_queue, settings):
    assert Client().get("/readyz").status_code == 200
    [entry] = heartbeats.live_workers(queue=worker_queue)
    assert entry["queues"] == [worker_queue] and entry["age_seconds"] < settings.MANGO_HEARTBEAT_STALE_SECONDS
    # A crash: no shutdown handler runs, so only the key's TTL says the worker is gone.
    live_worker.kill()
    key = f"{heartbeats.WORKER_PREFIX}{worker_queue}:{entry['hostname']}"
    ttl = redis.Redis.from_url(settings.REDIS_URL).ttl(key)
    assert 0 < ttl <= settings.MANGO_HEARTBEAT_STALE_SECONDS
    redis.Redis.from_url(settings.REDIS_URL).expire(key, 1)  # fast-forward the stale window
    time.sleep(1.5)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert "celery_worker" in response.json()["error"]["message"]


def test_a_stopped_worker_clears_its_heartbeat(live_worker, worker_queue):
    assert heartbeats.live_workers(queue=worker_queue)
    live_worker.stop()
    assert heartbeats.live_workers(queue=worker_queue) == []


def _store_at(settings, endpoint: str) -> None:
    storages = {**settings.STORAGES}
    storages["files"] = {**storages["files"], "OPTIONS": {**storages["files"]["OPTIONS"], "endpoint_url": endpoint}}
    settings.STORAGES = storages  # Django rebuilds the storage handler on this change


def test_readyz_names_the_object_store_and_its_endpoint_when_it_is_down(settings, caplog):
    # Nothing listens on port 9 (discard) here: the store is unreachable.
    _store_at(settings, "http://127.0.0.1:9")
    with caplog.at_level(logging.INFO):
        response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["type"] == "error"
    assert "object_store" in body["error"]["message"]
    reason = body["error"]["details"]["checks"]["object_store"]
    assert reason == f"down: EndpointConnectionError at http://127.0.0.1:9 (bucket {settings.MANGO_FILE_S3_BUCKET})"
    assert body["error"]["details"]["checks"]["postgresql"] == "ok"
    # A dependency that is down is logged once, as a warning naming it, not as a server error.
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.levelno == logging.WARNING and "http://127.0.0.1:9" in record.getMessage()


def test_readyz_names_redis_when_it_is_down(settings, s3_bucket):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert "redis" in response.json()["error"]["message"]


def test_readyz_skips_the_store_when_files_are_not_configured(settings):
    settings.MANGO_FILE_S3_BUCKET = None
    settings.MANGO_READYZ_REQUIRE_WORKER = False  # the worker check has tests of its own
    response = Client().get("/readyz")
    assert response.status_code == 200
