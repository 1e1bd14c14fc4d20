"""The signed backend (files/storage/signed.py): upload parts and object GETs sent as one signed
request each, against the real store; and the choice of backend."""

import contextlib
import hashlib
import os
import socket
import threading

import boto3
import pytest
from botocore.config import Config as BotoConfig

from core.errors import ServiceUnavailable
from files import storage
from files.storage.boto import Boto3Backend
from files.storage.signed import SignedS3Backend, signable
from tests.files.conftest import make_file

PART = 5 * 1024 * 1024


@pytest.fixture
def upload(workspace):
    key = storage.new_object_key(workspace_id=workspace.id)
    upload_id = storage.multipart_start(key=key, content_type="application/octet-stream")
    yield key, upload_id
    storage.multipart_abort(key=key, upload_id=upload_id)


@contextlib.contextmanager
def _botocore_calls(s3, operation: str):
    """The calls botocore makes of `operation` on the client while the block runs."""
    calls = []

    def count(**kwargs):
        calls.append(1)

    event = f"before-call.s3.{operation}"
    s3.meta.events.register(event, count)
    try:
        yield calls
    finally:
        s3.meta.events.unregister(event, count)


def _signed() -> SignedS3Backend:
    backend = storage.backend()
    assert type(backend) is SignedS3Backend, "the test store is reached over plain http: the signed backend"
    return backend


def test_parts_skip_botocore_and_the_object_is_what_was_sent(workspace, settings):
    """A 2-part File goes up through the raw PUTs (botocore's UploadPart is never called) and
    reads back byte for byte; with MANGO_FILE_S3_RAW_REQUESTS off the plain backend is chosen and
    the same upload uses botocore."""
    data = bytes(range(256)) * (PART * 2 // 256) + b"tail"
    for raw, expected_calls in ((True, 0), (False, 3)):
        settings.MANGO_FILE_S3_RAW_REQUESTS = raw
        assert type(storage.backend()) is (SignedS3Backend if raw else Boto3Backend)
        with _botocore_calls(storage.backend().client, "UploadPart") as calls:
            file = make_file(workspace, data, filename="two-parts.bin", mime_type="application/octet-stream")
        assert len(calls) == expected_calls
        assert file.size_bytes == len(data)
        assert file.sha256 == hashlib.sha256(data).hexdigest()
        assert storage.read_bounded(key=file.object_key, max_bytes=len(data)) == data


def test_a_part_is_verified_by_the_store_and_errors_are_translated(upload):
    key, upload_id = upload
    backend = _signed()
    part = bytearray(b"p" * PART)
    sent = backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part)
    assert sent == {"ETag": f'"{hashlib.md5(part).hexdigest()}"', "ChecksumCRC32C": storage.body_checksum(part)}
    held = backend.part_connection()

    # Bytes that do not match their CRC32C are refused by the store, not retried into success.
    wrong = storage.body_checksum(b"something else")
    with pytest.raises(storage.StorageUnavailable) as refused:
        backend.send_part(key=key, upload_id=upload_id, part_number=2, body=part, checksum=wrong)
    assert refused.value.details["store_error"] == "BadDigest"

    with pytest.raises(storage.StorageObjectMissing):
        backend.multipart_upload_part(key=key, upload_id="no-such-upload", part_number=1, body=part)

    # The connection stays usable after an error answer.
    assert backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=3, body=part)
    assert backend.part_connection() is held


def test_a_connection_the_store_closed_is_replaced(upload):
    """A kept-alive connection that died while idle costs a reconnect, not a failed part."""
    key, upload_id = upload
    backend = _signed()
    part = bytearray(b"k" * PART)
    backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part)
    held = backend.part_connection()
    held.sock.shutdown(socket.SHUT_RDWR)
    assert backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=2, body=part)
    assert backend.part_connection() is not held


def _signed_like_the_configured_one(
    *, port: int | None = None, secret: str | None = None, max_pool_connections: int = 10, **s3_config
) -> SignedS3Backend:
    """A signed backend for the same store and bucket (or another port), with other S3 settings
    (or another secret)."""
    configured = _signed()
    credentials = configured.credentials.get_frozen_credentials()
    endpoint = configured.client.meta.endpoint_url if port is None else f"http://127.0.0.1:{port}"
    session = boto3.session.Session(
        aws_access_key_id=credentials.access_key, aws_secret_access_key=secret or credentials.secret_key
    )
    client = session.client(
        "s3",
        endpoint_url=endpoint,
        region_name=configured.client.meta.region_name,
        config=BotoConfig(
            connect_timeout=1,
            read_timeout=5,
            s3={"addressing_style": "path", **s3_config},
            max_pool_connections=max_pool_connections,
        ),
    )
    assert signable(client, session.get_credentials())
    return SignedS3Backend(client=client, credentials=session.get_credentials(), bucket=configured.bucket)


def test_an_unreachable_store_is_503_after_the_retries():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    backend = _signed_like_the_configured_one(port=port)
    with pytest.raises(storage.StorageUnavailable) as down:
        backend.multipart_upload_part(key="files/x/y", upload_id="u", part_number=1, body=b"x")
    assert isinstance(down.value, ServiceUnavailable)
    assert down.value.details["store_error"] == "ConnectionRefusedError"


def test_signed_payloads_are_accepted(upload):
    """With MANGO_FILE_S3_SIGN_PAYLOAD's client config the PUT carries the body's SHA-256 in
    its signature, and the store takes it."""
    key, upload_id = upload
    backend = _signed_like_the_configured_one(payload_signing_enabled=True)
    part = bytearray(b"s" * PART)
    assert backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part) == {
        "ETag": f'"{hashlib.md5(part).hexdigest()}"',
        "ChecksumCRC32C": storage.body_checksum(part),
    }


def test_a_bad_signature_is_refused_not_retried(upload):
    """A PUT signed with the wrong secret fails as the store answers (403 is not retried)."""
    key, upload_id = upload
    backend = _signed_like_the_configured_one(secret="not-the-secret")
    part = bytearray(b"x" * PART)
    with pytest.raises(storage.StorageUnavailable) as refused:
        backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part)
    assert refused.value.details["store_error"] in {"SignatureDoesNotMatch", "AccessDenied", "403"}


def test_a_forked_child_does_not_share_the_parents_connections(upload):
    """A prefork worker's child builds its own backend (connections, boto3's pool): two processes
    on one socket would mix answers."""
    key, upload_id = upload
    backend = _signed()
    part = bytearray(b"f" * PART)
    backend.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part)
    held = backend.part_connection()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        os._exit(0 if storage.backend() is not backend else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert storage.backend() is backend and backend.part_connection() is held  # the parent keeps its own


def test_threads_making_the_first_use_at_once_share_one_backend(settings):
    """The first downloads after a start, on several API threads at once, build one backend (a
    second one would hold a store connection of its own, closed when it is collected)."""
    settings.MANGO_FILE_S3_RAW_REQUESTS = True  # a settings change: the next use builds anew
    start, built = threading.Barrier(8), []

    def first_use():
        start.wait()
        built.append(storage.backend())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 8 and len({id(backend) for backend in built}) == 1
    assert storage.backend() is built[0]


# --- GETs ------------------------------------------------------------------------------------


def test_reads_skip_botocore_and_reuse_one_connection(workspace, settings):
    """Whole and ranged reads come back exact without botocore's GetObject, and one kept-alive
    connection serves them one after another; with the setting off, botocore serves them."""
    data = os.urandom(300_000)
    file = make_file(workspace, data, filename="r.bin", mime_type="application/octet-stream")
    for raw, expected_calls in ((True, 0), (False, 3)):
        settings.MANGO_FILE_S3_RAW_REQUESTS = raw
        backend = storage.backend()
        with _botocore_calls(backend.client, "GetObject") as calls:
            assert b"".join(storage.iter_object(storage.open_object(key=file.object_key))) == data
            ranged = storage.open_object(key=file.object_key, first=10, last=19)
            assert b"".join(storage.iter_object(ranged)) == data[10:20]
            assert storage.read_bounded(key=file.object_key, max_bytes=99) == data[:100]
        assert len(calls) == expected_calls
        if raw:
            assert backend.idle_connections() == 1


def test_a_missing_object_and_an_empty_one(workspace, settings):
    for raw in (True, False):
        settings.MANGO_FILE_S3_RAW_REQUESTS = raw
        with pytest.raises(storage.StorageObjectMissing):
            storage.open_object(key=storage.new_object_key(workspace_id=workspace.id))
        empty = make_file(workspace, b"", filename="empty.txt")
        assert storage.read_bounded(key=empty.object_key, max_bytes=10) == b""  # the store's 416 InvalidRange


def test_a_read_left_unfinished_closes_its_connection(workspace):
    """A body closed before its end leaves its connection out of the pool (the rest of the bytes
    would be read as the next answer); a pooled connection the store closed is replaced."""
    data = os.urandom(2 * 1024 * 1024)
    file = make_file(workspace, data, filename="big.bin", mime_type="application/octet-stream")
    backend = _signed()
    stream = storage.open_object(key=file.object_key, chunk_size=64 * 1024)
    assert stream.read(1000) == data[:1000]
    stream.close()
    assert backend.idle_connections() == 0
    assert storage.read_bounded(key=file.object_key, max_bytes=10) == data[:11]
    (pooled,) = backend._idle
    pooled.sock.shutdown(socket.SHUT_RDWR)
    assert storage.read_bounded(key=file.object_key, max_bytes=10) == data[:11]
    assert backend._idle != [pooled]


def test_the_idle_pool_keeps_at_most_the_clients_pool_size(workspace):
    """However many downloads ran at once, at most max_pool_connections stay open afterwards."""
    file = make_file(workspace, b"pooled", filename="p.txt")
    backend = _signed_like_the_configured_one(max_pool_connections=2)
    streams = [backend.open_object(key=file.object_key, first=None, last=None, chunk_size=1024) for _ in range(5)]
    for stream in streams:
        assert b"".join(stream) == b"pooled"
        stream.close()
    assert backend.idle_connections() == 2


def test_the_plain_backend_translates_library_errors():
    """Every method of the boto3 backend raises StorageUnavailable / StorageObjectMissing, never
    botocore's exceptions: here against a port nothing listens on."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    configured = _signed_like_the_configured_one(port=port)
    backend = Boto3Backend(client=configured.client, credentials=configured.credentials, bucket=configured.bucket)
    calls = [
        lambda: backend.ping(),
        lambda: backend.put_object(key="files/x/y", body=b"x", content_type="text/plain"),
        lambda: backend.multipart_start(key="files/x/y", content_type="text/plain"),
        lambda: backend.multipart_upload_part(key="files/x/y", upload_id="u", part_number=1, body=b"x"),
        lambda: backend.multipart_complete(key="files/x/y", upload_id="u", parts=[]),
        lambda: backend.multipart_abort(key="files/x/y", upload_id="u"),
        lambda: backend.delete_object(key="files/x/y"),
        lambda: backend.copy_object(source_key="files/x/y", key="files/x/z", content_type="text/plain"),
        lambda: backend.head_object(key="files/x/y"),
        lambda: backend.open_object(key="files/x/y", first=None, last=None, chunk_size=1024),
        lambda: list(backend.list_objects(prefix="files/")),
        lambda: list(backend.list_multipart_uploads(prefix="files/")),
    ]
    for call in calls:
        with pytest.raises(storage.StorageUnavailable) as down:
            call()
        assert down.value.details["store_error"] == "EndpointConnectionError"
