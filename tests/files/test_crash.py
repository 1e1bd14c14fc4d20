"""kill -9 the server at the worst moments, restart, reconcile: afterwards every visible File
has its object with the recorded size and SHA-256, and the bucket holds nothing without a row.
Also what needs a real server: chunked (no Content-Length) uploads against the size limit."""

import hashlib
import http.client
import json
import socket
import threading
import time

import anthropic
import pytest

from files.models import File, StorageIntent
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file, multipart_uploads, temp_entries
from tests.files.server import GunicornServer, run_manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOUNDARY = "mango-crash-boundary"


@pytest.fixture
def start_server(tmp_path, s3_bucket):
    servers = []

    def start(workers=1, **env):
        server = GunicornServer(log_path=tmp_path / f"gunicorn-{len(servers)}.log", env=env, workers=workers).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def client_for(server, api_key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=str(api_key), max_retries=0, timeout=60)


def multipart_head(filename="big.bin") -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def multipart_tail() -> bytes:
    return f"\r\n--{BOUNDARY}--\r\n".encode()


def restart_and_reconcile(server, start_server, api_key) -> None:
    """What `make run` does after a crash: reconcile at startup, then serve again; check the
    new server works end to end."""
    server.stop()
    result = run_manage("reconcile_files", "--grace-seconds", "0", env=server.env)
    assert result.returncode == 0, result.stderr
    fresh = start_server()
    uploaded = client_for(fresh, api_key).beta.files.upload(file=("after.txt", b"after restart"))
    assert File.objects.get(pk=uploaded.id).size_bytes == 13


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_kill_mid_upload_after_intent_committed(start_server, api_key, workspace):
    kept = make_file(workspace, b"kept before the crash")
    server = start_server()
    size = 40 * 1024 * 1024
    head, tail = multipart_head(), multipart_tail()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        (
            f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {len(head) + size + len(tail)}\r\n\r\n"
        ).encode()
        + head
    )
    chunk = b"m" * (1024 * 1024)
    for _ in range(20):  # half the file: two parts go to the store, the rest never arrives
        sock.sendall(chunk)
    intent = wait_for(lambda: StorageIntent.objects.filter(state="open", upload_id__isnull=False).first())
    wait_for(lambda: multipart_uploads(workspace.id))
    server.kill_worker()
    sock.close()

    assert File.objects.filter(workspace=workspace).count() == 1
    assert StorageIntent.objects.get(pk=intent.pk).state == "open"
    assert len(multipart_uploads(workspace.id)) == 1
    restart_and_reconcile(server, start_server, api_key)
    assert StorageIntent.objects.get(pk=intent.pk).state == "rolled_back"
    assert File.objects.filter(pk=kept.pk).exists()
    assert_store_consistent(workspace.id)


@pytest.mark.parametrize("size", [1000, 9 * 1024 * 1024], ids=["single-put", "multipart"])
def test_kill_after_object_complete_before_row_commit(start_server, api_key, workspace, size):
    server = start_server(MANGO_TEST_CRASH_POINT="upload_before_commit")
    with pytest.raises(anthropic.APIConnectionError):
        client_for(server, api_key).beta.files.upload(file=("doomed.bin", b"d" * size))
    intent = StorageIntent.objects.get(state="open")
    # The object is complete in the store, but nothing is visible.
    assert bucket_keys(workspace.id) == {intent.object_key: size}
    assert File.objects.count() == 0
    restart_and_reconcile(server, start_server, api_key)
    assert StorageIntent.objects.get(pk=intent.pk).state == "rolled_back"
    assert intent.object_key not in bucket_keys(workspace.id)
    assert_store_consistent(workspace.id)


def test_kill_after_delete_hid_the_row(start_server, api_key, workspace):
    doomed = make_file(workspace, b"doomed", downloadable=True)
    kept = make_file(workspace, b"kept", downloadable=True)
    server = start_server(MANGO_TEST_CRASH_POINT="delete_after_hide")
    client = client_for(server, api_key)
    worker = server.worker_pid()
    with pytest.raises(anthropic.APIConnectionError):
        client.beta.files.delete(doomed.id)
    assert File.objects.get(pk=doomed.pk).state == File.State.DELETING
    assert doomed.object_key in bucket_keys(workspace.id)
    # Hidden from every route at once, before the bytes are gone.
    server.wait_for_new_worker(worker)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(doomed.id)
    assert [f.id for f in client.beta.files.list()] == [kept.id]
    restart_and_reconcile(server, start_server, api_key)
    assert not File.objects.filter(pk=doomed.pk).exists()
    assert StorageIntent.objects.get(kind="delete").state == "committed"
    assert_store_consistent(workspace.id)


def chunked_upload(server, api_key, size: int, *, with_length: bool) -> http.client.HTTPResponse:
    head, tail = multipart_head(), multipart_tail()

    def body():
        yield head
        block = b"c" * (4 * 1024 * 1024)
        left = size
        while left:
            piece = block[: min(left, len(block))]
            left -= len(piece)
            yield piece
        yield tail

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    if with_length:
        headers["Content-Length"] = str(len(head) + size + len(tail))
    conn.request("POST", "/v1/files", body=body(), headers=headers, encode_chunked=not with_length)
    return conn.getresponse()


def test_chunked_upload_without_content_length(start_server, api_key, workspace):
    limit = 3 * 1024 * 1024
    server = start_server(MANGO_FILE_MAX_BYTES=str(limit))
    before_tmp = temp_entries()
    response = chunked_upload(server, api_key, limit, with_length=False)
    assert response.status == 200, response.read()
    body = json.loads(response.read())
    assert body["size_bytes"] == limit
    assert File.objects.get(pk=body["id"]).sha256 == hashlib.sha256(b"c" * limit).hexdigest()
    response = chunked_upload(server, api_key, limit + 1, with_length=False)
    assert response.status == 413
    assert json.loads(response.read())["error"]["type"] == "request_too_large"
    assert File.objects.count() == 1
    assert temp_entries() == before_tmp
    assert_store_consistent(workspace.id)


@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "chunked"])
def test_real_500mb_plus_one_byte_is_413_and_leaves_nothing(start_server, api_key, workspace, with_length):
    server = start_server()
    before_tmp = temp_entries()
    started = time.monotonic()
    response = chunked_upload(server, api_key, 500_000_001, with_length=with_length)
    assert response.status == 413
    assert b"request_too_large" in response.read()
    assert time.monotonic() - started < 30
    assert File.objects.count() == 0
    assert bucket_keys(workspace.id) == {}
    assert multipart_uploads(workspace.id) == []
    assert not StorageIntent.objects.filter(state="open").exists()
    assert temp_entries() == before_tmp


# --- whole-server SIGKILL and restart: owner liveness (files/liveness.py) ----------------------


def open_raw_upload(server, api_key, *, size: int, sent: int) -> socket.socket:
    """A raw upload of `size` bytes of which only `sent` are sent (the rest later, or never)."""
    head, tail = multipart_head(), multipart_tail()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        (
            f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {len(head) + size + len(tail)}\r\n\r\n"
        ).encode()
        + head
    )
    sock.sendall(b"u" * sent)
    return sock


def finish_raw_upload(sock: socket.socket, *, remaining: int) -> dict:
    sock.sendall(b"u" * remaining + multipart_tail())
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 200, response.read()
    return json.loads(response.read())


def wait_ready(server, timeout=30.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("/readyz never answered 200")


def test_whole_server_killed_mid_upload_and_mid_delete_is_finished_at_restart(start_server, api_key, workspace):
    """SIGKILL every process of a server mid-upload and mid-delete; restart it as `make run`
    does (reconcile_files with the default one-hour grace window, then serve). Within 10 s of
    /readyz answering 200 the bucket holds exactly the visible Files' objects, no multipart upload
    is open and every intent is closed — except those of a second, live API process that is in
    the middle of its own upload all along, and then completes it untouched."""
    kept = make_file(workspace, b"kept before the crash", downloadable=True)
    doomed = make_file(workspace, b"doomed by a delete", downloadable=True)
    size = 20 * 1024 * 1024
    crashed = start_server(MANGO_TEST_CRASH_POINT="delete_after_hide", MANGO_TEST_CRASH_ACTION="hang", workers=2)
    live = start_server()

    # The server that will be killed: one upload with parts in the store, one delete past its hide.
    dying_upload = open_raw_upload(crashed, api_key, size=size, sent=size // 2)
    dying_intent = wait_for(
        lambda: StorageIntent.objects.filter(state="open", kind="upload", upload_id__isnull=False).first()
    )

    def delete_doomed():
        with pytest.raises(anthropic.APIConnectionError):  # its server is killed mid-request
            client_for(crashed, api_key).beta.files.delete(doomed.id)

    deleting = threading.Thread(target=delete_doomed, daemon=True)
    deleting.start()
    wait_for(lambda: "crash point reached: delete_after_hide" in crashed.log_text())
    delete_intent = StorageIntent.objects.get(kind="delete", state="open")
    assert File.objects.get(pk=doomed.pk).state == File.State.DELETING

    # The live server: an upload in progress (its multipart upload open) through it all.
    live_upload = open_raw_upload(live, api_key, size=size, sent=size // 2)
    live_intent = wait_for(
        lambda: (
            StorageIntent.objects.filter(state="open", kind="upload", upload_id__isnull=False)
            .exclude(pk=dying_intent.pk)
            .first()
        )
    )

    crashed.kill_all()
    dying_upload.close()
    assert len(multipart_uploads(workspace.id)) == 2
    assert doomed.object_key in bucket_keys(workspace.id)

    # Restart as `make run` does: reconcile (default grace window: 3600 s), then serve.
    result = run_manage("reconcile_files", env=crashed.env)
    assert result.returncode == 0, result.stderr
    assert "uploads_rolled_back=1" in result.stdout and "deletes_finished=1" in result.stdout, result.stdout
    # /readyz also wants a live Celery worker; this test is about the API processes and the store.
    restarted = start_server(MANGO_READYZ_REQUIRE_WORKER="false")
    ready_at = wait_ready(restarted)

    def settled():
        open_intents = set(StorageIntent.objects.filter(state="open").values_list("pk", flat=True))
        uploads = {u["upload_id"] for u in multipart_uploads(workspace.id)}
        visible = {f.object_key for f in File.objects.filter(workspace=workspace, state="ready")}
        return (
            open_intents == {live_intent.pk}
            and uploads == {live_intent.upload_id}
            and (set(bucket_keys(workspace.id)) == visible)
        )

    wait_for(settled, timeout=10)
    assert time.monotonic() - ready_at < 10
    assert StorageIntent.objects.get(pk=dying_intent.pk).state == "rolled_back"
    assert StorageIntent.objects.get(pk=delete_intent.pk).state == "committed"
    assert not File.objects.filter(pk=doomed.pk).exists()
    # Nothing about the live upload was touched, not even by a pass without any grace window.
    assert run_manage("reconcile_files", "--grace-seconds", "0", env=crashed.env).returncode == 0
    assert StorageIntent.objects.get(pk=live_intent.pk).attempts == 0

    body = finish_raw_upload(live_upload, remaining=size - size // 2)
    live_upload.close()
    assert body["size_bytes"] == size
    assert File.objects.get(pk=body["id"]).sha256 == hashlib.sha256(b"u" * size).hexdigest()
    assert set(File.objects.filter(workspace=workspace).values_list("id", flat=True)) == {kept.id, body["id"]}
    assert not StorageIntent.objects.filter(state="open").exists()
    assert_store_consistent(workspace.id)
