"""Downloads on the real serving layout (config.asgi under gunicorn + uvicorn, as `make run`):
the File's bytes, headers, ranges and errors as the Django view defines them, sent by
config.downloads both ways (spliced from the store's socket, and read in chunks); a download
whose client goes away stops reading the store. The access log counts the bytes sent."""

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

import pytest
import requests

from files.models import File
from tests.files.conftest import make_file
from tests.files.server import AsgiServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

# The embedded store make test started (pyproject.toml's default endpoint otherwise).
STORE_PORT = urlsplit(os.environ.get("MANGO_FILE_S3_ENDPOINT_URL", "http://127.0.0.1:8333")).port


@pytest.fixture(params=["splice", "chunks"])
def server(request, tmp_path, s3_bucket):
    splice = "true" if request.param == "splice" else "false"
    server = AsgiServer(log_path=tmp_path / "asgi.log", env={"MANGO_FILE_DOWNLOAD_SPLICE": splice}).start()
    yield server
    server.stop()


@pytest.fixture
def big(workspace):
    data = os.urandom(1024 * 1024) * 96  # 96 MiB
    return make_file(workspace, data, filename="big.bin", mime_type="application/octet-stream", downloadable=True)


def _get(server, key, path, **headers):
    return requests.get(f"{server.url}{path}", headers={"authorization": f"Bearer {key}", **headers}, timeout=60)


def test_download_bytes_headers_and_ranges(server, api_key, workspace):
    data = os.urandom(5 * 1024 * 1024 + 17)
    file = make_file(workspace, data, filename="résumé.bin", mime_type="application/pdf", downloadable=True)
    path = f"/v1/files/{file.id}/content"

    response = _get(server, api_key, path)
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-disposition"].startswith('attachment; filename="r_sum_.bin"')
    assert response.headers["x-content-type-options"] == "nosniff"
    assert re.fullmatch(r"req_[0-9a-f]{32}", response.headers["request-id"])
    _assert_logged_bytes(server, response.headers["request-id"], len(data))

    ranged = _get(server, api_key, path, range="bytes=1000-2999999")
    assert ranged.status_code == 206
    assert ranged.content == data[1000:3_000_000]
    assert ranged.headers["content-range"] == f"bytes 1000-2999999/{len(data)}"
    suffix = _get(server, api_key, path, range="bytes=-10")
    assert suffix.status_code == 206 and suffix.content == data[-10:]

    assert _get(server, api_key, path, **{"if-none-match": response.headers["etag"]}).status_code == 304
    unsatisfiable = _get(server, api_key, path, range=f"bytes={len(data)}-")
    assert unsatisfiable.status_code == 416
    assert unsatisfiable.headers["content-range"] == f"bytes */{len(data)}"
    assert unsatisfiable.json()["type"] == "error"

    missing = _get(server, api_key, f"/v1/files/file_{uuid.uuid4().hex[:26]}/content")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    assert re.fullmatch(r"req_[0-9a-f]{32}", missing.headers["request-id"])
    assert requests.get(f"{server.url}{path}", timeout=10).status_code == 401

    File.objects.filter(pk=file.id).update(expires_at="2000-01-01T00:00:00Z")
    expired = _get(server, api_key, path)
    assert expired.status_code == 404
    assert expired.json()["error"]["details"]["error_code"] == "file_expired"

    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    counted = re.search(r"^mango_file_download_bytes_total (\S+)$", metrics, re.M)
    assert counted and float(counted.group(1)) >= len(data) + 2_999_000 + 10


def _assert_logged_bytes(server, request_id: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in server.log_text().splitlines():
            if request_id in line and '"gunicorn.access"' in line:
                assert json.loads(line)["response_bytes"] == str(count)
                return
        time.sleep(0.1)
    raise AssertionError(f"no access line for {request_id}")


def test_large_download_is_whole(server, api_key, big):
    digest = hashlib.sha256()
    with requests.get(
        f"{server.url}/v1/files/{big.id}/content",
        headers={"authorization": f"Bearer {api_key}"},
        stream=True,
        timeout=60,
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_content(1024 * 1024):
            digest.update(chunk)
    assert digest.hexdigest() == big.sha256


class StoreTap:
    """A byte-counting TCP relay in front of the real store: the server under test reaches the
    store through it, so the test sees how much each store connection carried to the server,
    when the server closed it, and whether the store had ended it first (a store may close a
    kept-alive connection when it likes: that one is not the server's to keep)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections: list[dict] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                server_side, _ = self.listener.accept()
            except OSError:
                return
            store_side = socket.create_connection(("127.0.0.1", STORE_PORT))
            record = {"to_server": 0, "server_closed_at": None, "store_ended_first": False}
            self.connections.append(record)
            threading.Thread(target=self._from_server, args=(server_side, store_side, record), daemon=True).start()
            threading.Thread(target=self._to_server, args=(store_side, server_side, record), daemon=True).start()

    def _from_server(self, server_side, store_side, record):
        try:
            while data := server_side.recv(256 * 1024):
                store_side.sendall(data)
        except OSError:
            pass
        with self._lock:
            record["server_closed_at"] = time.monotonic()
        store_side.close()

    def _to_server(self, store_side, server_side, record):
        try:
            while data := store_side.recv(256 * 1024):
                server_side.sendall(data)
                record["to_server"] += len(data)
        except OSError:
            pass
        with self._lock:
            record["store_ended_first"] = record["server_closed_at"] is None
        with contextlib.suppress(OSError):
            server_side.shutdown(socket.SHUT_WR)

    def closed_by_server(self) -> list[dict]:
        """The connections the server closed while the store still kept them."""
        with self._lock:
            return [r for r in self.connections if r["server_closed_at"] is not None and not r["store_ended_first"]]

    def ended_by_store(self) -> int:
        with self._lock:
            return sum(r["store_ended_first"] for r in self.connections)

    def close(self):
        self.listener.close()


@pytest.fixture(params=["splice", "chunks"])
def tapped_server(request, tmp_path, s3_bucket):
    tap = StoreTap()
    env = {"MANGO_FILE_S3_ENDPOINT_URL": tap.url, "MANGO_FILE_DOWNLOAD_SPLICE": str(request.param == "splice").lower()}
    server = AsgiServer(log_path=tmp_path / "asgi.log", env=env).start()
    server.tap = tap
    yield server
    server.stop()
    tap.close()


def test_abandoned_download_stops_reading_the_store(tapped_server, api_key, big):
    server, tap = tapped_server, tapped_server.tap
    request = f"GET /v1/files/{big.id}/content HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n\r\n"
    client = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
    client.sendall(request.encode())
    received = 0
    while received < 1024 * 1024:
        received += len(client.recv(256 * 1024))
    time.sleep(1.0)  # a client that stops reading: the server fills its buffers and waits
    download = max(tap.connections, key=lambda record: record["to_server"])
    assert download["server_closed_at"] is None
    client.close()
    gone = time.monotonic()

    while download["server_closed_at"] is None and time.monotonic() < gone + 3:
        time.sleep(0.05)
    assert download["server_closed_at"] is not None, "the store connection was kept open"
    assert download["server_closed_at"] - gone < 2
    assert download["to_server"] < big.size_bytes // 2, "the server read on though nobody was reading"
    # The server is fine afterwards.
    assert _get(server, api_key, f"/v1/files/{big.id}").status_code == 200


def test_head_sends_the_headers_of_a_get_and_reads_nothing_from_the_store(tapped_server, api_key, big):
    server, tap = tapped_server, tapped_server.tap
    path = f"{server.url}/v1/files/{big.id}/content"
    headers = {"authorization": f"Bearer {api_key}"}
    before = sum(record["to_server"] for record in tap.connections)
    whole = requests.head(path, headers=headers, timeout=30)
    part = requests.head(path, headers={**headers, "range": "bytes=10-19"}, timeout=30)
    assert (whole.status_code, whole.headers["content-length"]) == (200, str(big.size_bytes))
    assert whole.headers["etag"] == f'"{big.sha256}"' and whole.content == b""
    assert (part.status_code, part.headers["content-length"]) == (206, "10")
    assert part.headers["content-range"] == f"bytes 10-19/{big.size_bytes}"
    time.sleep(0.5)
    assert sum(record["to_server"] for record in tap.connections) - before < 64 * 1024  # no object bytes


def test_whole_downloads_give_their_store_connection_back(tapped_server, api_key, workspace):
    """A download read to its end (spliced or in chunks, whole or a range) leaves its store
    connection at the end of a response: the next download reuses it instead of connecting anew."""
    server, tap = tapped_server, tapped_server.tap
    data = os.urandom(3 * 1024 * 1024 + 5)
    file = make_file(workspace, data, filename="d.bin", mime_type="application/octet-stream", downloadable=True)
    path = f"/v1/files/{file.id}/content"
    assert _get(server, api_key, path).content == data  # the worker's first store connection
    opened = len(tap.connections)
    for _ in range(5):
        assert _get(server, api_key, path).content == data
        part = _get(server, api_key, path, range="bytes=10-1000009")
        assert part.status_code == 206 and part.content == data[10:1000010]
    assert tap.closed_by_server() == [], tap.connections
    # A new connection only for one the store ended (none, mostly).
    assert len(tap.connections) - opened <= tap.ended_by_store(), tap.connections
