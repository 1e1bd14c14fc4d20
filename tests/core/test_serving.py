"""The real serving layout (`make run`, the Dockerfile): gunicorn + uvicorn workers running
config.asgi, against the test database, the real store and Redis. Per-workspace caps (429),
stalled uploads (408), event streams on the event loop, and the database pool."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import anthropic
import psycopg
import pytest
import redis
import requests
from django.conf import settings
from django.db import connection

from core import caps
from files import storage
from files.models import File, StorageIntent
from sessions import notify
from tests.files.conftest import bucket_keys, multipart_uploads
from tests.files.server import ROOT, AsgiServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

MAX_STREAMS = 2
MAX_UPLOADS = 2
IDLE_SECONDS = 2
HEADER_SECONDS = 2
BOUNDARY = "mango-test-boundary"


@pytest.fixture
def server(tmp_path, s3_bucket):
    app_name = f"mango-test-{uuid.uuid4().hex[:12]}"
    env = {
        "MANGO_WORKSPACE_MAX_STREAMS": str(MAX_STREAMS),
        "MANGO_WORKSPACE_MAX_UPLOADS": str(MAX_UPLOADS),
        "MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS": str(IDLE_SECONDS),
        "MANGO_SSE_HEARTBEAT_SECONDS": "1",
        "MANGO_HEADER_TIMEOUT_SECONDS": str(HEADER_SECONDS),
        # The pool closes one idle connection above its minimum per this many seconds: at the
        # default (5) the 7 of a burst take 35 s to go (test_connections_return_to_the_pool...).
        "MANGO_DB_POOL_MAX_IDLE_SECONDS": "1",
        # libpq names the server's connections, so the test can count them.
        "PGAPPNAME": app_name,
    }
    server = AsgiServer(log_path=tmp_path / "asgi.log", env=env).start()
    server.app_name = app_name
    yield server
    server.stop()


def _client(server, key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=str(key), max_retries=0)


def _session(client) -> str:
    agent = client.beta.agents.create(name="a", model="claude-sonnet-4-5")
    env = client.beta.environments.create(name="e")
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def _open_stream(server, key, session_id, accept="text/event-stream") -> requests.Response:
    return requests.get(
        f"{server.url}/v1/sessions/{session_id}/events/stream",
        headers={"authorization": f"Bearer {key}", "accept": accept},
        stream=True,
        timeout=10,
    )


def _first_line(response) -> str:
    """The stream's first line. The line iterator is kept on the response: dropping it would
    close the connection (urllib3 releases it when the generator closes)."""
    response.lines = response.iter_lines(chunk_size=1, decode_unicode=True)
    return next(response.lines)


def _server_connections(app_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app_name])
        return cursor.fetchone()[0]


def test_sdk_round_trip_on_the_real_layout(server, api_key):
    client = _client(server, api_key)
    uploaded = client.beta.files.upload(file=("notes.txt", b"hello " * 1000, "text/plain"))
    assert uploaded.size_bytes == 6000
    assert [f.id for f in client.beta.files.list().data] == [uploaded.id]
    assert client.beta.files.retrieve_metadata(uploaded.id).filename == "notes.txt"
    client.beta.files.delete(uploaded.id)
    assert client.beta.files.list().data == []


def test_event_stream_accepts_text_event_stream_and_json(server, api_key):
    client = _client(server, api_key)
    session_id = _session(client)
    for accept in ("text/event-stream", "application/json"):
        with _open_stream(server, api_key, session_id, accept=accept) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            assert response.headers["request-id"].startswith("req_")
            lines = response.iter_lines(chunk_size=1, decode_unicode=True)
            assert next(lines) == ": connected"
            client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
            for line in lines:
                if line.startswith("event: ") and line != "event: ping":
                    assert line == "event: user.interrupt"
                    data = json.loads(next(lines).removeprefix("data: "))
                    assert data["type"] == "user.interrupt" and data["id"].startswith("sevt_")
                    break
    # The SDK reads the same stream; heartbeats (1 s here) are skipped by it.
    with client.beta.sessions.events.stream(session_id) as stream:
        threading.Timer(
            1.5, lambda: client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        ).start()
        assert next(iter(stream)).type == "user.interrupt"


def test_event_stream_ends_after_session_deleted(server, api_key):
    client = _client(server, api_key)
    session_id = _session(client)
    with _open_stream(server, api_key, session_id) as response:
        lines = response.iter_lines(chunk_size=1, decode_unicode=True)
        assert next(lines) == ": connected"
        client.beta.sessions.delete(session_id)
        seen = [line for line in lines if line.startswith("event: ")]
    assert seen[-1] == "event: session.deleted"


def test_stream_cap_refuses_only_the_tenant_at_its_cap(server, api_key, other_api_key):
    alpha, beta = _client(server, api_key), _client(server, other_api_key)
    alpha_session, beta_session = _session(alpha), _session(beta)
    held = [_open_stream(server, api_key, alpha_session) for _ in range(MAX_STREAMS)]
    try:
        assert [_first_line(r) for r in held] == [": connected"] * MAX_STREAMS
        refused = _open_stream(server, api_key, alpha_session)
        assert refused.status_code == 429
        assert refused.headers["retry-after"].isdigit()
        assert refused.json()["error"]["type"] == "rate_limit_error"
        with pytest.raises(anthropic.RateLimitError), alpha.beta.sessions.events.stream(alpha_session):
            pass

        # Another workspace is not affected.
        with _open_stream(server, other_api_key, beta_session) as other:
            assert other.status_code == 200 and _first_line(other) == ": connected"
            assert beta.beta.files.list().data == []
    finally:
        held.pop().close()
    # A stream that ends frees its slot at once.
    deadline = time.monotonic() + 10
    while True:
        again = _open_stream(server, api_key, alpha_session)
        if again.status_code == 200 or time.monotonic() > deadline:
            break
        again.close()
        time.sleep(0.2)
    assert again.status_code == 200
    again.close()
    for response in held:
        response.close()


def _subscribers(session_id: str) -> int:
    """Subscribers of the session's wake-up channel: one per API process with a feed for it."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return dict(client.pubsub_numsub(notify.events_channel(session_id)))[notify.events_channel(session_id).encode()]
    finally:
        client.close()


def _wait_for_subscribers(session_id: str, count: int, timeout: float) -> float:
    started = time.monotonic()
    while _subscribers(session_id) != count:
        assert time.monotonic() - started < timeout, f"{_subscribers(session_id)} subscribers, not {count}"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_feed_stops_when_its_last_stream_leaves(server, api_key):
    """One feed per session per process: a second stream shares it, and only when the last stream
    of the session closes does the process stop following it (no reads, channel unsubscribed)."""
    client = _client(server, api_key)
    session_id = _session(client)
    first, second = _open_stream(server, api_key, session_id), _open_stream(server, api_key, session_id)
    assert [_first_line(first), _first_line(second)] == [": connected", ": connected"]
    assert 1 <= _subscribers(session_id) <= 2  # one per worker process serving these streams
    first.close()
    # The stream left behind is still served.
    client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert next(line for line in second.lines if line.startswith("event: ") and line != "event: ping") == (
        "event: user.interrupt"
    )
    assert _subscribers(session_id) >= 1
    second.close()
    _wait_for_subscribers(session_id, 0, timeout=10)


class SlowUpload:
    """A raw-socket upload that sends its body a little at a time (or stops)."""

    def __init__(self, server, key, *, size: int):
        self.head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="slow.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        self.tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        self.size = size
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        request = (
            f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {len(self.head) + size + len(self.tail)}\r\n\r\n"
        ).encode()
        self.sock.sendall(request + self.head)
        self.sent = 0

    def send(self, count: int) -> None:
        self.sock.sendall(b"x" * count)
        self.sent += count

    def finish(self) -> None:
        self.send(self.size - self.sent)
        self.sock.sendall(self.tail)

    def response(self) -> tuple[int, dict]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        while len(body) < length:
            body += self.sock.recv(65536)
        return status, json.loads(body)

    def close(self) -> None:
        self.sock.close()


def test_upload_cap_refuses_only_the_tenant_at_its_cap(server, api_key, other_api_key):
    alpha, beta = _client(server, api_key), _client(server, other_api_key)
    slow = [SlowUpload(server, api_key, size=64) for _ in range(MAX_UPLOADS)]
    stop = threading.Event()

    def trickle():  # a byte now and then: slow, never idle
        while not stop.wait(0.3):
            for upload in slow:
                if upload.sent < upload.size - 1:
                    upload.send(1)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        _wait_for_slots("uploads", api_key.workspace.id, MAX_UPLOADS)
        with pytest.raises(anthropic.RateLimitError) as refused:
            alpha.beta.files.upload(file=("a.txt", b"refused", "text/plain"))
        assert refused.value.response.headers["retry-after"].isdigit()
        assert refused.value.body["error"]["type"] == "rate_limit_error"
        # Another workspace uploads and lists as usual meanwhile.
        accepted = beta.beta.files.upload(file=("b.txt", b"accepted", "text/plain"))
        assert [f.id for f in beta.beta.files.list().data] == [accepted.id]
    finally:
        stop.set()
        trickler.join()
    for upload in slow:
        upload.finish()
        status, body = upload.response()
        assert status == 200, body
        upload.close()
    # Finished uploads free their slots.
    assert alpha.beta.files.upload(file=("c.txt", b"after", "text/plain")).size_bytes == 5


def _wait_for_slots(kind: str, workspace_id: str, count: int, timeout: float = 20) -> None:
    """Until the server holds `count` of the workspace's slots (the requests reached the gate)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + timeout
    while client.zcard(caps.cap_key(kind, workspace_id)) < count:
        assert time.monotonic() < deadline, f"{kind} slots never reached {count}"
        time.sleep(0.05)
    client.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_oversized_headers_are_431_without_buffering_them(server, api_key):
    """uvicorn's parser has no header limit of its own: a 64 MiB header must not be buffered."""
    headers = {"x-api-key": str(api_key)}
    assert requests.get(f"{server.url}/v1/files", headers=headers, timeout=30).status_code == 200  # warm
    worker = server.worker_pid()
    before = _rss_kib(worker)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Junk: ")
    with contextlib.suppress(OSError):  # the server closes the connection partway
        for _ in range(64):
            sock.sendall(b"a" * (1024 * 1024))
    response = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            response += chunk
    sock.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), head[:200]
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    assert (_rss_kib(worker) - before) < 16 * 1024, "the worker buffered the header"
    # Ordinary large headers pass, and the worker serves on.
    ok = requests.get(f"{server.url}/v1/files", headers={**headers, "x-big": "b" * 16384}, timeout=30)
    assert ok.status_code == 200


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (monotonic)."""
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data, time.monotonic()


def test_connections_that_never_finish_their_headers_are_closed_with_408(server):
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    trickling = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    opened = time.monotonic()
    trickling.sendall(b"GET /v1/files HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def trickle():  # a header byte every 0.3 s: never idle, never done
        with contextlib.suppress(OSError):
            while not stop.wait(0.3):
                trickling.sendall(b"a")

    threading.Thread(target=trickle, daemon=True).start()
    try:
        for sock in (silent, trickling):
            data, closed = _read_until_closed(sock)
            assert data.startswith(b"HTTP/1.1 408 "), data[:200]
            assert json.loads(data.partition(b"\r\n\r\n")[2])["error"]["type"] == "invalid_request_error"
            assert HEADER_SECONDS * 0.9 <= closed - opened < HEADER_SECONDS + 10
    finally:
        stop.set()
        silent.close()
        trickling.close()


def test_stalled_upload_is_408_and_leaves_nothing(server, api_key):
    workspace_id = api_key.workspace.id
    upload = SlowUpload(server, api_key, size=20 * 1024 * 1024)
    upload.send(9 * 1024 * 1024)  # more than one part: a multipart upload is under way
    started = time.monotonic()
    status, body = upload.response()
    waited = time.monotonic() - started
    upload.close()
    assert status == 408, body
    assert body["error"]["type"] == "timeout_error"
    assert body["error"]["details"]["error_code"] == "request_body_timeout"
    assert IDLE_SECONDS - 0.5 < waited < IDLE_SECONDS + 10
    assert not File.objects.filter(workspace_id=workspace_id).exists()
    intents = list(StorageIntent.objects.filter(workspace_id=workspace_id))
    assert intents, "the upload had begun: its intent was committed"
    assert all(i.state == StorageIntent.State.ROLLED_BACK and i.closed_at for i in intents), intents
    assert bucket_keys(workspace_id) == {}
    assert multipart_uploads(workspace_id) == []
    assert storage.backend().bucket


def test_connections_return_to_the_pool_minimum_after_a_burst(server, api_key):
    client = _client(server, api_key)
    client.beta.files.upload(file=("a.txt", b"a", "text/plain"))
    url, headers = f"{server.url}/v1/files", {"authorization": f"Bearer {api_key}"}
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        with psycopg.connect(_dsn(), autocommit=True) as conn:
            while not done.is_set():
                count = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [server.app_name]
                ).fetchone()[0]
                peak = max(peak, count)
                time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(max_workers=200) as pool:
        statuses = list(pool.map(lambda _: requests.get(url, headers=headers, timeout=60).status_code, range(200)))
    done.set()
    sampler.join()
    assert statuses == [200] * 200
    assert 1 <= peak <= settings.MANGO_DB_POOL_MAX_SIZE, peak
    started = time.monotonic()
    while _server_connections(server.app_name) > settings.MANGO_DB_POOL_MIN_SIZE:
        assert time.monotonic() - started < 60, _server_connections(server.app_name)
        time.sleep(1)
    print(
        f"\npool: peak {peak} connections during 200 concurrent requests; back to "
        f"{settings.MANGO_DB_POOL_MIN_SIZE} after {time.monotonic() - started:.1f} s"
    )


def _dsn() -> str:
    params = connection.get_connection_params()
    return psycopg.conninfo.make_conninfo(
        host=params.get("host") or "",
        port=params.get("port") or "",
        user=params.get("user") or "",
        dbname=params["dbname"],
    )


def test_event_stream_on_a_wsgi_server_accepts_text_event_stream(live_server, sdk, api_key):
    """config.wsgi servers (here the test live server) run the same stream code on a private loop."""
    session_id = _session(sdk)
    with requests.get(
        f"{live_server.url}/v1/sessions/{session_id}/events/stream",
        headers={"authorization": f"Bearer {api_key}", "accept": "text/event-stream"},
        stream=True,
        timeout=10,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines(chunk_size=1, decode_unicode=True)
        assert next(lines) == ": connected"
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        assert next(line for line in lines if line.startswith("event: ")) == "event: user.interrupt"


def test_a_wsgi_stream_ends_when_its_client_leaves(live_server, sdk, api_key):
    """A WSGI server learns that a client left only when a write fails (the next heartbeat, 15 s
    here); the private loop watches the client's socket, so the stream and its feed stop at once."""
    assert settings.MANGO_SSE_HEARTBEAT_SECONDS >= 10
    session_id = _session(sdk)
    response = requests.get(
        f"{live_server.url}/v1/sessions/{session_id}/events/stream",
        headers={"authorization": f"Bearer {api_key}"},
        stream=True,
        timeout=10,
    )
    assert _first_line(response) == ": connected"
    _wait_for_subscribers(session_id, 1, timeout=5)
    response.close()
    assert _wait_for_subscribers(session_id, 0, timeout=10) < 10  # the next heartbeat is 15 s away


def test_worker_recycling_is_off_by_default():
    """config/gunicorn.conf.py: no GUNICORN_MAX_REQUESTS, no recycling (it would end every stream)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUNICORN_")}
    code = "import runpy; print(runpy.run_path('config/gunicorn.conf.py')['max_requests'])"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "0", result.stderr


def test_a_recycled_worker_ends_its_streams_cleanly_and_clients_resume(tmp_path, s3_bucket, api_key):
    """GUNICORN_MAX_REQUESTS set: when the worker recycles, its open stream ends as a complete
    response at once (not cut off after GUNICORN_GRACEFUL_TIMEOUT); the client reconnects to the
    new worker and finds what it missed in the events list."""
    server = AsgiServer(
        log_path=tmp_path / "asgi.log",
        env={"GUNICORN_MAX_REQUESTS": "8", "GUNICORN_MAX_REQUESTS_JITTER": "0", "GUNICORN_GRACEFUL_TIMEOUT": "60"},
    ).start()
    try:
        client = _client(server, api_key)
        session_id = _session(client)  # 3 requests
        old_worker = server.worker_pid()
        response = _open_stream(server, api_key, session_id)  # 4
        assert _first_line(response) == ": connected"
        sent = client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])  # 5
        seen = []
        started = time.monotonic()
        while len(client.beta.files.list().data) == 0 and time.monotonic() - started < 2:  # 6, 7, 8: recycle
            time.sleep(0.1)
        for line in response.lines:  # ends without an error: the chunked response was completed
            if line.startswith("data: ") and json.loads(line.removeprefix("data: "))["type"] != "ping":
                seen.append(json.loads(line.removeprefix("data: "))["id"])
        ended_after = time.monotonic() - started
        assert seen == [sent.data[0].id]
        assert ended_after < 30, ended_after
        new_worker = server.wait_for_new_worker(old_worker, timeout=60)
        assert new_worker != old_worker
        # Resume: what was sent meanwhile is in the list; a new stream is served by the new worker.
        missed = client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        listed = [event.id for event in client.beta.sessions.events.list(session_id)]
        assert listed[-2:] == [sent.data[0].id, missed.data[0].id]
        with _open_stream(server, api_key, session_id) as again:
            assert _first_line(again) == ": connected"
    finally:
        server.stop()
