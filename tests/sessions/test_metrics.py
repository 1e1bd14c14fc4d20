"""/metrics end to end, in the multiprocess layout `make run` and the image use: a real gunicorn
with two workers and a real Celery worker sharing one PROMETHEUS_MULTIPROC_DIR. Recorded values
(request latency, bytes, model calls) and scrape-time values (sessions, queues, intents) move
after an upload, a download and a turn."""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.files.server import free_port
from tests.scripted_model import error, text
from tests.sessions.conftest import wait_for, worker_env
from tests.worker import CeleryWorker
from tests.worker import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
def stack(tmp_path, scripted_model, django_db_blocker):
    """gunicorn (2 workers) + a Celery worker, one metrics directory, a queue of their own."""
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    queue = f"mango-test-metrics-{os.getpid()}-{time.monotonic_ns()}"
    shared = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "MANGO_SESSIONS_QUEUE": queue}
    port = free_port()
    env = {**os.environ, **shared, "DATABASE_URL": database_url(), "DATABASE_CONN_MAX_AGE": "0"}
    log = open(tmp_path / "gunicorn.log", "wb")  # noqa: SIM115 — closed below
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "-c", "config/gunicorn.conf.py", "config.asgi:application",
         "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    with django_db_blocker.unblock():
        worker = CeleryWorker(env={**worker_env(scripted_model), **shared}, queues=queue, concurrency=1).start(
            timeout=90
        )
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _up(url), timeout=90, interval=0.2)
    yield url
    worker.stop()
    os.killpg(server.pid, signal.SIGINT)  # quick shutdown (SIGTERM waits out graceful_timeout)
    server.wait(60)
    log.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    """The sum of `name` over samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def test_metrics_move_after_an_upload_a_download_and_turns(stack, api_key, model):
    sdk = anthropic.Anthropic(base_url=stack, api_key=str(api_key), max_retries=0)
    before = scrape(stack)
    for name in ("mango_queue_depth", "mango_sessions", "mango_turns_running", "mango_sandboxes",
                 "mango_storage_intents_open", "mango_celery_workers_live"):  # fmt: skip
        assert any(n == name for n, _ in before), name
    assert value(before, "mango_celery_workers_live") >= 1
    assert value(before, "mango_metrics_collector_up") == 3  # celery, files, sessions

    payload = b"metrics " * 1000
    uploaded = sdk.beta.files.upload(file=("m.txt", io.BytesIO(payload), "text/plain"))
    from files.models import File

    File.objects.filter(id=uploaded.id).update(downloadable=True)
    assert sdk.beta.files.download(uploaded.id).read() == payload

    model.script([text("Counted."), error(500), error(500)])
    env = sdk.beta.environments.create(name="m", config={"type": "cloud", "networking": {"type": "limited"}})
    agent = sdk.beta.agents.create(name="m", model="claude-sonnet-4-5", system="Be brief.")
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        initial_events=[{"type": "user.message", "content": [{"type": "text", "text": "count"}]}],
    )

    def idle_after(turns: int):
        events = list(sdk.beta.sessions.events.list(session.id))
        done = [e for e in events if e.type == "session.status_idle"]
        return events if len(done) >= turns else None

    wait_for(lambda: idle_after(1), timeout=90)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "fail"}]}]
    )
    wait_for(lambda: idle_after(2), timeout=90)

    after = scrape(stack)
    assert value(after, "mango_file_upload_bytes_total") - value(before, "mango_file_upload_bytes_total") == len(
        payload
    )
    assert value(after, "mango_file_download_bytes_total") - value(before, "mango_file_download_bytes_total") == len(
        payload
    )
    uploads = value(after, "mango_http_request_duration_seconds_count", route="v1/files", method="POST", status="200")
    assert (
        uploads
        - value(before, "mango_http_request_duration_seconds_count", route="v1/files", method="POST", status="200")
        == 1
    )
    # Recorded in the Celery worker's process, visible at the API's /metrics (one directory).
    ok_calls = value(after, "mango_model_call_duration_seconds_count", outcome="ok")
    assert ok_calls - value(before, "mango_model_call_duration_seconds_count", outcome="ok") == 1
    assert value(after, "mango_model_call_errors_total") - value(before, "mango_model_call_errors_total") == 2
    # Scrape-time values from PostgreSQL.
    assert value(after, "mango_sessions", status="idle") - value(before, "mango_sessions", status="idle") == 1
    assert value(after, "mango_turns_running") == 0

    # An open event stream is counted while it is open (summed over the live workers), then not.
    assert value(after, "mango_event_streams_open") == 0
    stream_url = f"{stack}/v1/sessions/{session.id}/events/stream"
    with httpx.stream("GET", stream_url, headers={"x-api-key": str(api_key)}, timeout=30) as stream:
        assert stream.status_code == 200
        chunks = stream.iter_raw()  # held: a dropped iterator would close the stream
        assert next(chunks).startswith(b": connected")
        assert value(scrape(stack), "mango_event_streams_open") == 1
    wait_for(lambda: value(scrape(stack), "mango_event_streams_open") == 0, timeout=30, interval=0.2)


def test_metrics_token(client, settings):
    settings.MANGO_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
    response = client.get("/metrics", headers={"authorization": "Bearer s3cret"})
    assert response.status_code == 200
    assert b"mango_http_request_duration_seconds" in response.content
