"""Uploads on the real serving layout (config.asgi under gunicorn + uvicorn, as `make run`), over
raw sockets: a body of known length is read by the upload's thread straight from the client's
socket (config/uvicorn.py's BodySocket, files/uploads.py's SocketBody), and the connection is
handed back to uvicorn afterwards. Each test proves one thing that must still hold: the bytes and
their SHA-256, keep-alive and pipelining after such a body, `Expect: 100-continue`, an error
before the body's end (the rest is dropped, the connection serves on), the 413 at 500,000,001
bytes (declared and chunked), a client that goes away, and nothing left behind."""

import hashlib
import json
import os
import re
import socket
import threading
import time

import pytest
import requests

from files.models import File, StorageIntent
from tests.files.conftest import assert_store_consistent, bucket_keys, multipart_uploads, temp_entries
from tests.files.server import AsgiServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

BOUNDARY = "mango-asgi-upload"
MIB = 1024 * 1024


@pytest.fixture
def server(tmp_path, s3_bucket):
    server = AsgiServer(log_path=tmp_path / "asgi.log", env={"MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS": "5"}).start()
    yield server
    server.stop()


def file_part(data: bytes, *, name: str = "file", filename: str = "data.bin") -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + data


def closing() -> bytes:
    return f"\r\n--{BOUNDARY}--\r\n".encode()


def upload_head(key: str, length: int, *extra: str) -> bytes:
    lines = [
        "POST /v1/files HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {key}",
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def list_request(key: str) -> bytes:
    return f"GET /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


class Connection:
    """One client connection; reads responses one at a time (keep-alive, pipelining)."""

    def __init__(self, server):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_slowly(self, data: bytes, *, pieces: int = 8) -> None:
        """In pieces with pauses: the server has taken the body over before most of it arrives."""
        step = -(-len(data) // pieces)
        for start in range(0, len(data), step):
            self.sock.sendall(data[start : start + step])
            time.sleep(0.05)

    def _fill(self) -> None:
        chunk = self.sock.recv(MIB)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def close(self) -> None:
        self.sock.close()


def new_upload(server, key: str, size: int, *extra_headers: str) -> tuple[Connection, bytes, bytes]:
    """A connection that sent an upload's headers: (it, the file's random bytes, the body to send)."""
    data = os.urandom(size)
    body = file_part(data) + closing()
    conn = Connection(server)
    conn.send(upload_head(key, len(body), *extra_headers))
    return conn, data, body


def socket_bodies(server) -> float:
    """How many upload bodies the server read from the client's socket in the upload's thread."""
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(r'^mango_file_upload_bodies_total\{reader="socket"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_body_read_from_the_socket_is_whole_and_the_connection_serves_on(server, api_key, workspace):
    before = socket_bodies(server)
    conn, data, body = new_upload(server, api_key, 12 * MIB + 1)  # three parts in the store
    conn.send_slowly(body)
    status, headers, payload = conn.response()
    assert status == 200, payload
    assert headers.get("connection") != "close"
    uploaded = json.loads(payload)
    row = File.objects.get(pk=uploaded["id"])
    assert row.size_bytes == len(data) and row.sha256 == hashlib.sha256(data).hexdigest()
    assert socket_bodies(server) == before + 1
    # The same connection: a small upload (its body arrives with its headers), a listing, and
    # another large body read from the socket.
    small = file_part(b"small") + closing()
    conn.send(upload_head(api_key, len(small)) + small)
    status, _, payload = conn.response()
    assert status == 200 and json.loads(payload)["size_bytes"] == 5
    conn.send(list_request(api_key))
    status, _, payload = conn.response()
    assert status == 200 and len(json.loads(payload)["data"]) == 2
    conn.send(upload_head(api_key, len(body)))
    conn.send_slowly(body)
    status, _, payload = conn.response()
    assert status == 200 and json.loads(payload)["size_bytes"] == len(data)
    assert socket_bodies(server) == before + 2
    conn.close()
    assert_store_consistent(workspace.id)


def test_a_request_pipelined_after_a_socket_read_body_is_answered(server, api_key, workspace):
    conn, _, body = new_upload(server, api_key, 6 * MIB)
    conn.send(body[: 3 * MIB])
    time.sleep(0.3)  # the server takes the body over
    conn.send(body[3 * MIB :] + list_request(api_key))
    status, _, payload = conn.response()
    assert status == 200, payload
    file_id = json.loads(payload)["id"]
    status, _, payload = conn.response()
    assert status == 200 and [f["id"] for f in json.loads(payload)["data"]] == [file_id]
    conn.close()
    assert_store_consistent(workspace.id)


def test_expect_100_continue_gets_its_interim_response(server, api_key, workspace):
    conn, data, body = new_upload(server, api_key, 3 * MIB, "Expect: 100-continue")
    while b"\r\n\r\n" not in conn.buffer:  # the client waits for it before sending the body
        conn._fill()
    assert conn.buffer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), conn.buffer[:200]
    conn.buffer = conn.buffer[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    conn.send_slowly(body)
    status, _, payload = conn.response()
    assert status == 200, payload
    assert File.objects.get(pk=json.loads(payload)["id"]).sha256 == hashlib.sha256(data).hexdigest()
    conn.close()


def test_an_error_before_the_body_ends_drops_the_rest_and_serves_on(server, api_key, workspace):
    """A second file part fails the upload once the first is read: the client, still sending,
    gets the 400; the rest of its body is read and dropped; the connection serves on."""
    first, second = os.urandom(6 * MIB), os.urandom(24 * MIB)
    body = file_part(first) + b"\r\n" + file_part(second, filename="second.bin") + closing()
    conn = Connection(server)
    conn.send(upload_head(api_key, len(body)))
    sender = threading.Thread(target=conn.send_slowly, args=(body,), kwargs={"pieces": 30})
    sender.start()
    status, _, payload = conn.response()
    sender.join()
    assert status == 400, payload
    assert "More than one file" in json.loads(payload)["error"]["message"]
    conn.send(list_request(api_key))
    status, _, payload = conn.response()
    assert status == 200 and json.loads(payload)["data"] == []
    conn.close()
    assert not File.objects.filter(workspace_id=workspace.id).exists()
    assert all(i.state == StorageIntent.State.ROLLED_BACK for i in StorageIntent.objects.all())
    assert bucket_keys(workspace.id) == {}
    assert multipart_uploads(workspace.id) == []


def test_a_client_that_goes_away_mid_body_leaves_nothing(server, api_key, workspace):
    conn, _, body = new_upload(server, api_key, 16 * MIB)
    conn.send_slowly(body[: 9 * MIB], pieces=4)
    conn.close()
    deadline = time.monotonic() + 30
    while StorageIntent.objects.filter(state=StorageIntent.State.OPEN).exists() or not StorageIntent.objects.exists():
        assert time.monotonic() < deadline, "the abandoned upload was never rolled back"
        time.sleep(0.1)
    assert not File.objects.filter(workspace_id=workspace.id).exists()
    assert bucket_keys(workspace.id) == {}
    assert multipart_uploads(workspace.id) == []
    # The worker serves on.
    assert requests.get(f"{server.url}/v1/files", headers={"x-api-key": str(api_key)}, timeout=10).status_code == 200


def _send_generated(conn: Connection, size: int, *, chunked: bool) -> None:
    """The file part's head, `size` bytes of file and the closing delimiter; as chunks of the
    chunked transfer coding when `chunked` (the client stops early if the server closes)."""
    block = b"z" * (4 * MIB)
    pieces = [file_part(b"")]
    left = size
    try:
        for piece in pieces:
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        while left:
            piece = block[: min(left, len(block))]
            left -= len(piece)
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        tail = closing()
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail) if chunked else tail)
    except OSError:
        pass


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_500mb_plus_one_byte_is_413_and_leaves_nothing(server, api_key, workspace, chunked):
    size = 500_000_001
    length = len(file_part(b"")) + size + len(closing())
    before_tmp = temp_entries()
    conn = Connection(server)
    if chunked:
        head = upload_head(api_key, 0).replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    else:
        head = upload_head(api_key, length)
    conn.send(head)
    started = time.monotonic()
    sender = threading.Thread(target=_send_generated, args=(conn, size), kwargs={"chunked": chunked})
    sender.start()
    status, _, payload = conn.response()
    sender.join()
    assert status == 413, payload
    assert json.loads(payload)["error"]["type"] == "request_too_large"
    assert time.monotonic() - started < 60
    if not chunked:  # the whole declared body was read: the connection serves on
        conn.send(list_request(api_key))
        assert conn.response()[0] == 200
    conn.close()
    assert not File.objects.exists()
    assert bucket_keys(workspace.id) == {}
    assert multipart_uploads(workspace.id) == []
    assert not StorageIntent.objects.filter(state="open").exists()
    assert temp_entries() == before_tmp
