"""kill -9 the server at the worst moments, restart, reconcile: afterwards every visible File
has its object with the recorded size and SHA-256, and the bucket holds nothing without a row.
Also what needs a real server: chunked (no Content-Length) uploads against the size limit."""

import hashlib
import http.client
import json
import socket
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

    def start(**env):
        server = GunicornServer(log_path=tmp_path / f"gunicorn-{len(servers)}.log", env=env).start()
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
