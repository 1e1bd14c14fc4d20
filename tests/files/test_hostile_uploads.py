"""Hostile `POST /v1/files` bodies are 4xx envelopes with nothing stored (issue 11, part 3):
an oversized part header however it arrives, a broken chunked framing, and file names that
carry control, line-separator or bidirectional-override characters."""

import io
import socket

import pytest

from core.errors import InvalidRequest
from files import services
from files.models import File, StorageIntent
from files.multipart import MAX_PART_HEADER_BYTES, MultipartReader
from files.uploads import UploadForm
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file
from tests.files.server import AsgiServer, GunicornServer

BOUNDARY = "hostile-boundary"


def upload_body(*, header_padding: int = 0, filename: str = "a.txt", data: bytes = b"data") -> bytes:
    padding = f"X-Pad: {'p' * header_padding}\r\n" if header_padding else ""
    return (
        (
            f"--{BOUNDARY}\r\n"
            f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"{padding}Content-Type: text/plain\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


def post(api, body: bytes):
    return api.generic("POST", "/v1/files", body, content_type=f"multipart/form-data; boundary={BOUNDARY}")


def assert_nothing_stored(workspace):
    assert File.objects.filter(workspace=workspace).count() == 0
    assert not StorageIntent.objects.filter(state="open").exists()
    assert bucket_keys(workspace.id) == {}


@pytest.mark.django_db
@pytest.mark.parametrize("extra", [1, 4096, 64 * 1024], ids=["one-byte-over", "4k-over", "64k-over"])
def test_part_header_over_the_limit_in_the_first_buffer_is_400(api, workspace, extra):
    body = upload_body(header_padding=MAX_PART_HEADER_BYTES + extra)
    assert len(body) < 1024 * 1024  # the whole header arrives in the reader's first read
    response = post(api, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "part header is too long" in error["message"]
    assert_nothing_stored(workspace)


@pytest.mark.django_db
def test_part_header_just_under_the_limit_is_accepted(api, workspace):
    body = upload_body(header_padding=MAX_PART_HEADER_BYTES - 200)
    response = post(api, body)
    assert response.status_code == 200, response.content
    assert response.json()["size_bytes"] == 4
    assert_store_consistent(workspace.id)


@pytest.mark.parametrize("read_size", [7, 1000, 1 << 20])
def test_header_limit_holds_at_any_read_size(read_size):
    raw = upload_body(header_padding=MAX_PART_HEADER_BYTES + 1)
    reader = MultipartReader(io.BytesIO(raw), boundary=BOUNDARY.encode(), content_length=len(raw), read_size=read_size)
    with pytest.raises(InvalidRequest, match="too long"):
        UploadForm(reader, boundary=BOUNDARY.encode()).read_until_file()


def test_a_long_preamble_in_one_read_is_refused_too():
    raw = b"p" * (MAX_PART_HEADER_BYTES + 10) + b"\r\n" + upload_body()
    reader = MultipartReader(io.BytesIO(raw), boundary=BOUNDARY.encode(), content_length=len(raw))
    with pytest.raises(InvalidRequest, match="preamble is too long"):
        UploadForm(reader, boundary=BOUNDARY.encode()).read_until_file()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("evil\u202etxt.exe", "eviltxt.exe"),
        ("a\u2066b\u2069c\u200f.txt", "abc.txt"),
        ("line\u2028sep\u2029.txt", "linesep.txt"),
        ("c1\x85\x9bname.txt", "c1name.txt"),
        ("\u202e", "unnamed.txt"),
    ],
    ids=["rlo", "isolates-rlm", "line-separators", "c1", "only-unsafe"],
)
def test_upload_filenames_lose_unsafe_characters(sdk, workspace, sent, stored):
    uploaded = sdk.beta.files.upload(file=(sent, b"x", "text/plain"))
    assert uploaded.filename == stored
    assert File.objects.get(pk=uploaded.id).filename == stored
    assert sdk.beta.files.retrieve_metadata(uploaded.id).filename == stored


@pytest.mark.django_db
def test_resource_copy_of_a_legacy_name_is_cleaned(workspace):
    legacy = make_file(workspace, b"bytes", filename="legacy\u202etxt.exe")  # stored before names were cleaned
    copy = services.file_copy(source=legacy, scope_session_id="sesn_x")
    assert copy.filename == "legacytxt.exe"
    assert_store_consistent(workspace.id)


def _send_with_bad_chunk(port: int, api_key, chunk_size_line: bytes) -> bytes:
    body = upload_body(data=b"d" * 100)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
                f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            ).encode()
            + f"{50:x}\r\n".encode()
            + body[:50]
            + b"\r\n"
            + chunk_size_line
            + b"\r\n"
            + body[50:]
            + b"\r\n0\r\n\r\n"
        )
        response = b""
        while not response.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            response += data
    return response


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("server_class", [AsgiServer, GunicornServer], ids=["asgi-make-run", "wsgi-gthread"])
def test_invalid_chunk_size_is_400_and_stores_nothing(tmp_path, api_key, workspace, server_class):
    """Through a real server: it de-chunks the body and fails on a bad chunk-size line."""
    server = server_class(log_path=tmp_path / "gunicorn.log").start()
    try:
        for chunk_size_line in [b"zz", b"-1", b"1x", b"\xff\xfe", b""]:
            response = _send_with_bad_chunk(server.port, api_key, chunk_size_line)
            status_line, _, rest = response.partition(b"\r\n")
            assert status_line.split()[1] == b"400", (chunk_size_line, response[:500])
            assert b'"invalid_request_error"' in rest, response[:500]
            assert_nothing_stored(workspace)
    finally:
        server.stop()
