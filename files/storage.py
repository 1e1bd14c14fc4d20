"""The only module that talks to the object store (django-storages' S3Storage, over boto3).

Object keys are random and prefixed by workspace; user filenames never reach a key.
Every failure to reach the store surfaces as StorageUnavailable (the API renders it as 503);
a missing object is StorageObjectMissing.
"""

import base64
import contextlib
import http.client
import os
import random
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import crc32c
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.files.storage import storages

from core.errors import ObjectStoreUnavailable, ServiceUnavailable

KEY_PREFIX = "files/"

_MISSING_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchUpload"}


class StorageUnavailable(ObjectStoreUnavailable):
    """The store could not be reached or answered an error (503 object_store_unavailable)."""


class StorageObjectMissing(Exception):
    """The object (or multipart upload) does not exist."""


def is_configured() -> bool:
    return bool(settings.MANGO_FILE_S3_BUCKET)


def require_configured() -> None:
    if not is_configured():
        raise ServiceUnavailable(
            "Files storage is not configured: set MANGO_FILE_S3_BUCKET (and the MANGO_FILE_S3_* "
            "endpoint, region and credential variables) to enable the Files API.",
            code="files_storage_not_configured",
        )


def _storage():
    # Django's StorageHandler caches the instance (and resets it when settings change).
    return storages["files"]


_client_of: tuple[object, object] | None = None


def client():
    """The boto3 S3 client behind django-storages, one per process: clients are thread-safe,
    and django-storages' own per-thread connection would build a new one (reading the service
    model's JSON, a noticeable CPU cost) in every thread that touches the store."""
    global _client_of
    current = _storage()
    cached = _client_of
    if cached is not None and cached[0] is current:
        return cached[1]
    s3 = current.connection.meta.client
    _client_of = (current, s3)
    return s3


def bucket() -> str:
    return settings.MANGO_FILE_S3_BUCKET


def ping() -> None:
    client().head_bucket(Bucket=bucket())


@contextlib.contextmanager
def _translate_errors(*, missing_ok: bool = False):
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code in _MISSING_CODES or status == 404:
            if missing_ok:
                return
            raise StorageObjectMissing(code or "404") from exc
        raise StorageUnavailable(details={"store_error": code or str(status)}) from exc
    except BotoCoreError as exc:
        raise StorageUnavailable(details={"store_error": type(exc).__name__}) from exc


def workspace_prefix(workspace_id: str) -> str:
    return f"{KEY_PREFIX}{workspace_id}/"


def new_object_key(*, workspace_id: str) -> str:
    return f"{workspace_prefix(workspace_id)}{secrets.token_hex(16)}"


# --- writes ---------------------------------------------------------------------------------


# Every body sent to the store carries its CRC32C, which the store verifies (a part that arrives
# different is refused: BadDigest): hardware CRC32C costs ~0.04 CPU s/GB, where botocore's own
# default, CRC32 through zlib, cost ~0.4 s/GB of the upload path (bench/files_throughput.py).
CHECKSUM_ALGORITHM = "CRC32C"


def body_checksum(body) -> str:
    """The base64 CRC32C of `body` (any buffer), as S3's x-amz-checksum-crc32c carries it."""
    return base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode("ascii")


def put_object(*, key: str, body: bytes, content_type: str, s3=None) -> None:
    with _translate_errors():
        (s3 or client()).put_object(
            Bucket=bucket(), Key=key, Body=body, ContentType=content_type, ChecksumCRC32C=body_checksum(body)
        )


def multipart_start(*, key: str, content_type: str, s3=None) -> str:
    with _translate_errors():
        return (s3 or client()).create_multipart_upload(
            Bucket=bucket(), Key=key, ContentType=content_type, ChecksumAlgorithm=CHECKSUM_ALGORITHM
        )["UploadId"]


def multipart_upload_part(*, key: str, upload_id: str, part_number: int, body: bytes, s3=None) -> dict:
    """Store one part; returns what multipart_complete needs of it (its ETag and checksum)."""
    checksum = body_checksum(body)
    s3 = s3 or client()
    if _SignedRequests.usable(s3):
        etag = _PartPut(s3).send(key=key, upload_id=upload_id, part_number=part_number, body=body, checksum=checksum)
        return {"ETag": etag, "ChecksumCRC32C": checksum}
    with _translate_errors():
        response = s3.upload_part(
            Bucket=bucket(), Key=key, UploadId=upload_id, PartNumber=part_number, Body=body, ChecksumCRC32C=checksum
        )
    return {"ETag": response["ETag"], "ChecksumCRC32C": checksum}


class _SignedRequests:
    """S3 requests of the hot paths (UploadPart, GetObject) sent as one signed request each on a
    kept-alive http.client connection, instead of through botocore's request pipeline.

    botocore takes each call through parameter validation, serialisation, a score of event
    hooks, its retry handler, urllib3's pool (and, for a part, an `Expect: 100-continue` round
    trip): ~2-3 ms of CPU a call. That is ~0.5 CPU s/GB of an upload at 5 MiB parts, and a third
    of what a download costs the server before its first byte (bench/files_throughput.py). Here
    the request is the same one (same headers and checksum), signed by botocore's own SigV4
    signer with the client's credentials, fetched as the client does (refreshed when they
    expire), and an error answer is read as botocore reads it: `<Code>` of the XML body. Retries
    follow the client's standard mode: a connection error, 5xx or throttling is tried again (3
    attempts, jittered backoff); a kept-alive connection the store closed while it sat idle is
    replaced at once.

    Used when the store is reached over plain http, path-style and without a proxy (what
    MANGO_FILE_S3_* configures) and MANGO_FILE_S3_RAW_REQUESTS is on; any other setup goes
    through the client's own calls."""

    ATTEMPTS = 3
    _RETRY_STATUS = {429, 500, 502, 503, 504}
    _RETRY_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"}
    _CODE = re.compile(rb"<Code>([^<]{1,128})</Code>")

    def __init__(self, s3):
        self.s3 = s3
        endpoint = urlsplit(s3.meta.endpoint_url)
        self.netloc = endpoint.netloc
        self.host, self.port = endpoint.hostname, endpoint.port or 80
        self.base_url = f"http://{self.netloc}"
        config = s3.meta.config
        self.connect_timeout = config.connect_timeout
        self.read_timeout = config.read_timeout

    @staticmethod
    def usable(s3) -> bool:
        if not settings.MANGO_FILE_S3_RAW_REQUESTS:
            return False
        config = s3.meta.config
        return (
            (s3.meta.endpoint_url or "").startswith("http://")
            and not config.proxies
            and (config.s3 or {}).get("addressing_style") == "path"
            and getattr(getattr(s3, "_request_signer", None), "_credentials", None) is not None
        )

    @staticmethod
    def object_path(key: str) -> str:
        return f"/{quote(bucket(), safe='')}/{quote(key, safe='/-_.~')}"

    def _new_connection(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        conn.connect()
        conn.sock.settimeout(self.read_timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _send_request(self, conn, method: str, target: str, headers: dict, body=None) -> http.client.HTTPResponse:
        """Sign and send; the response with its status line and headers read."""
        request = AWSRequest(method=method, url=self.base_url + target, headers=headers, data=body)
        request.context["client_config"] = self.s3.meta.config  # payload signing as configured
        signer = self.s3._request_signer
        credentials = signer._credentials.get_frozen_credentials()
        S3SigV4Auth(credentials, signer.signing_name, signer.region_name).add_auth(request)
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", self.netloc)
        for name, value in request.headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body is not None:
            conn.send(body)
        return conn.getresponse()

    def _send_fresh_if_stale(self, conn, reused: bool, method: str, target: str, headers: dict, body=None):
        """(the connection used, the response). A kept-alive connection the store closed while
        it sat idle fails at once: the request is sent again on a new one (both S3 requests
        sent this way are idempotent)."""
        try:
            return conn, self._send_request(conn, method, target, headers, body)
        except (ConnectionError, http.client.RemoteDisconnected):
            if not reused:
                raise
            conn.close()
            conn = self._new_connection()
            try:
                return conn, self._send_request(conn, method, target, headers, body)
            except BaseException:
                conn.close()
                raise

    def _give_up_unless_retryable(self, attempt: int, status: int, code: str | None) -> None:
        """After an error answer: StorageObjectMissing, StorageUnavailable, or return to retry."""
        if code in _MISSING_CODES or status == 404:
            raise StorageObjectMissing(code or "404")
        if attempt == self.ATTEMPTS or not (status in self._RETRY_STATUS or code in self._RETRY_CODES):
            raise StorageUnavailable(details={"store_error": code or str(status)})

    def _give_up_if_last(self, attempt: int, exc: Exception) -> None:
        """After the store could not be reached (or answered nothing usable)."""
        if attempt == self.ATTEMPTS:
            raise StorageUnavailable(details={"store_error": type(exc).__name__}) from exc

    def _error_code(self, response: http.client.HTTPResponse) -> str | None:
        found = self._CODE.search(response.read(64 * 1024))
        return found.group(1).decode("ascii", "replace") if found else None

    @staticmethod
    def _backoff(attempt: int) -> None:
        time.sleep(random.uniform(0, 0.1 * 2**attempt))


class _PartPut(_SignedRequests):
    """UploadPart on a connection of the calling (part) thread's own."""

    _connections = threading.local()

    def send(self, *, key: str, upload_id: str, part_number: int, body, checksum: str) -> str:
        """The part's ETag. StorageObjectMissing when the upload is gone, StorageUnavailable for
        anything else the store refuses or cannot be reached for."""
        target = f"{self.object_path(key)}?partNumber={part_number}&uploadId={quote(upload_id, safe='')}"
        headers = {"Content-Length": str(len(body)), "x-amz-checksum-crc32c": checksum}
        for attempt in range(1, self.ATTEMPTS + 1):
            try:
                status, etag, code = self._put(target, headers, body)
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                self._give_up_if_last(attempt, exc)
            else:
                if status == 200 and etag:
                    return etag
                self._give_up_unless_retryable(attempt, status, code)
            self._backoff(attempt)
        raise AssertionError("unreachable")

    def _put(self, target: str, headers: dict, body) -> tuple[int, str | None, str | None]:
        reused = getattr(self._connections, "conn", None) is not None
        conn, response = self._send_fresh_if_stale(self._connection(), reused, "PUT", target, headers, body)
        self._connections.conn = (self.netloc, conn)
        code = self._error_code(response) if response.status != 200 else None
        if response.status == 200:
            response.read()
        if response.will_close or not response.isclosed():
            self._drop()
        return response.status, response.getheader("ETag"), code

    def _connection(self) -> http.client.HTTPConnection:
        held = getattr(self._connections, "conn", None)
        if held is not None and held[0] == self.netloc:
            return held[1]
        self._drop()
        conn = self._new_connection()
        self._connections.conn = (self.netloc, conn)
        return conn

    def _drop(self) -> None:
        held = getattr(self._connections, "conn", None)
        self._connections.conn = None
        if held is not None:
            held[1].close()

    @classmethod
    def forget_connections(cls) -> None:
        """In a forked child: the parent's connections are not this process's to use."""
        cls._connections = threading.local()


class _ObjectGet(_SignedRequests):
    """GetObject; its connection serves the body until it was read to its end (then it waits in
    a pool shared by the process's downloads, for the next one) or the stream is closed."""

    _idle: dict[str, list[http.client.HTTPConnection]] = {}
    _lock = threading.Lock()

    def open(self, *, key: str, first: int | None, last: int | None) -> "_RawObject":
        headers = {}
        if first is not None:
            headers["Range"] = f"bytes={first}-{'' if last is None else last}"
        target = self.object_path(key)
        for attempt in range(1, self.ATTEMPTS + 1):
            conn = None
            try:
                conn, reused = self._take()
                conn, response = self._send_fresh_if_stale(conn, reused, "GET", target, headers)
                if response.status in (200, 206):
                    return _RawObject(response, conn, self)
                code = self._error_code(response)
            except (OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    conn.close()
                self._give_up_if_last(attempt, exc)
            else:
                self._finish(conn, response)
                self._give_up_unless_retryable(attempt, response.status, code)
            self._backoff(attempt)
        raise AssertionError("unreachable")

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(self.netloc)
            if idle:
                return idle.pop(), True
        return self._new_connection(), False

    def _finish(self, conn, response: http.client.HTTPResponse) -> None:
        """The response was read to its end: keep the connection for the next GET if it may be."""
        if response.will_close or not response.isclosed():
            conn.close()
            return
        with self._lock:
            idle = self._idle.setdefault(self.netloc, [])
            if len(idle) < (self.s3.meta.config.max_pool_connections or 10):
                idle.append(conn)
                return
        conn.close()

    @classmethod
    def forget_connections(cls) -> None:
        cls._idle = {}
        cls._lock = threading.Lock()


class _RawObject:
    """open_object()'s body on the raw path: the store's http.client response (read by
    ObjectStream, or moved by splice from its socket), and its connection."""

    def __init__(self, response: http.client.HTTPResponse, conn: http.client.HTTPConnection, getter: _ObjectGet):
        self.response = response
        self._conn = conn
        self._getter = getter

    def read(self, size: int = -1) -> bytes:
        return self.response.read(size)

    def release(self) -> None:
        """The body was read to its end: the connection serves a later GET."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._getter._finish(conn, self.response)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self.response.close()
        if conn is not None:
            conn.close()


def _forget_connections() -> None:
    _PartPut.forget_connections()
    _ObjectGet.forget_connections()


os.register_at_fork(after_in_child=_forget_connections)


def multipart_complete(*, key: str, upload_id: str, parts: list[dict], s3=None) -> None:
    """`parts`: what multipart_upload_part returned for parts 1, 2, ... in order."""
    numbered = [{"PartNumber": number, **part} for number, part in enumerate(parts, start=1)]
    with _translate_errors():
        (s3 or client()).complete_multipart_upload(
            Bucket=bucket(), Key=key, UploadId=upload_id, MultipartUpload={"Parts": numbered}
        )


def multipart_abort(*, key: str, upload_id: str) -> None:
    """Idempotent: an upload that is already gone is fine."""
    with _translate_errors(missing_ok=True):
        client().abort_multipart_upload(Bucket=bucket(), Key=key, UploadId=upload_id)


def delete_object(*, key: str) -> None:
    """Idempotent: deleting a missing key succeeds."""
    with _translate_errors(missing_ok=True):
        client().delete_object(Bucket=bucket(), Key=key)


def copy_object(*, source_key: str, key: str, content_type: str) -> None:
    """Server-side copy: no bytes pass through this process."""
    with _translate_errors():
        client().copy_object(
            Bucket=bucket(),
            Key=key,
            CopySource={"Bucket": bucket(), "Key": source_key},
            ContentType=content_type,
            MetadataDirective="REPLACE",
        )


# --- reads ----------------------------------------------------------------------------------


def head_object(*, key: str) -> dict | None:
    """{"size": int} for an existing object, None when missing."""
    try:
        with _translate_errors():
            response = client().head_object(Bucket=bucket(), Key=key)
    except StorageObjectMissing:
        return None
    return {"size": response["ContentLength"]}


def open_object(*, key: str, first: int | None = None, last: int | None = None):
    """A streaming body for the object (or the inclusive byte range first..last). The caller
    iterates `iter_object` over it and must close it."""
    kwargs = {"Bucket": bucket(), "Key": key}
    if first is not None:
        kwargs["Range"] = f"bytes={first}-{'' if last is None else last}"
    s3 = client()
    if _SignedRequests.usable(s3):
        return _ObjectGet(s3).open(key=key, first=first, last=last)
    with _translate_errors():
        return s3.get_object(**kwargs)["Body"]


def iter_object(body, *, chunk_size: int = 1024 * 1024) -> Iterator[bytes]:
    """Yield bounded chunks from an open_object() body and close it, however iteration ends."""
    stream = ObjectStream(body, chunk_size=chunk_size)
    try:
        yield from stream
    finally:
        stream.close()


class ObjectStream:
    """An open_object() body read in bounded chunks: iterable, and a file-like `read(size)` for
    servers that stream a response's file themselves (WSGI's wsgi.file_wrapper: config.asgi's
    download path, gunicorn's). The caller closes it.

    Each chunk is one read of the store's HTTP response (http.client's, under urllib3 and
    botocore's StreamingBody, which would each add a step and a copy): the bytes arrive in a
    fresh bytes object with the kernel's one copy and go to the client socket as they are.
    A response that ends short of its Content-Length raises StorageUnavailable. `abort()`, from
    any thread, shuts the store connection down: a read blocked on it returns at once (a
    download whose client went away stops reading the store)."""

    def __init__(self, body, *, chunk_size: int):
        self.chunk_size = chunk_size
        self._body = body
        self._raw = _http_response(body)
        self._expected = self._raw.length if self._raw is not None else None
        self._received = 0
        self._lock = threading.Lock()

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.chunk_size
        if self._raw is None:
            try:
                with _translate_errors():
                    return self._body.read(size)
            except (OSError, http.client.HTTPException) as exc:  # a _RawObject's own errors
                raise StorageUnavailable(details={"store_error": type(exc).__name__}) from exc
        try:
            chunk = self._raw.read(size)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise StorageUnavailable(details={"store_error": type(exc).__name__}) from exc
        if chunk:
            self._received += len(chunk)
        elif self._expected is not None and self._received != self._expected:
            raise StorageUnavailable(details={"store_error": "IncompleteRead"})
        else:
            self._release()
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(self.chunk_size):
            yield chunk

    @property
    def spliceable(self) -> bool:
        """Whether splice_source() can hand the body over (checked without I/O)."""
        raw = self._raw
        if raw is None or self._received or raw.chunked or not raw.length:
            return False
        sock = getattr(getattr(raw.fp, "raw", None), "_sock", None)
        return type(sock) is socket.socket  # an ssl.SSLSocket's bytes are ciphertext

    def splice_source(self) -> tuple[int, bytes, int] | None:
        """For a server that moves the rest of the body to its client with splice(2), socket to
        socket without passing through this process's memory: (the store socket's descriptor,
        the bytes already buffered off it, how many more follow), or None when the body cannot
        be moved that way (TLS, chunked framing, content decoding, already read from). After
        this the stream is only told what was moved (spliced()) and closed."""
        if not self.spliceable:
            return None
        raw = self._raw
        sock = raw.fp.raw._sock
        length = raw.length
        try:
            head = raw.fp.read1(min(len(raw.fp.peek(1)), length))
        except (OSError, ValueError) as exc:
            raise StorageUnavailable(details={"store_error": type(exc).__name__}) from exc
        if not head:
            raise StorageUnavailable(details={"store_error": "IncompleteRead"})
        self._received = len(head)
        return sock.fileno(), head, length - len(head)

    def spliced(self, count: int) -> None:
        """The server moved the `count` bytes that followed splice_source()'s head: the body
        was read whole, and the store connection can serve another request."""
        self._received += count
        if self._received == self._expected:
            with self._lock:
                self._raw._close_conn()  # what http.client does once it read the last byte itself
            self._release()

    def _release(self) -> None:
        """Once the whole body was read: the store connection goes back to botocore's pool (it
        sits at the end of a response) instead of being closed with the stream. A download
        then costs no new TCP connection to the store (connect, and a close on both sides:
        ~1 ms of the ~5 ms a download spends before its first byte)."""
        raw = self._raw
        with self._lock:  # not while abort() (from another thread) shuts the socket down
            if raw is not None and raw.fp is None and not raw.will_close:
                if type(self._body) is _RawObject:
                    self._body.release()
                else:
                    self._body._raw_stream.release_conn()

    def abort(self) -> None:
        with self._lock:
            sock = getattr(getattr(getattr(self._raw, "fp", None), "raw", None), "_sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._body.close()


def _http_response(body) -> http.client.HTTPResponse | None:
    """The http.client response under a botocore StreamingBody (or a _RawObject), when its bytes
    can be read from it directly: not yet read from, no content decoding in between."""
    if type(body) is _RawObject:
        raw = body.response
        if raw.fp is None or raw.getheader("Content-Encoding", "identity") != "identity":
            return None
        return raw
    stream = getattr(body, "_raw_stream", None)
    raw = getattr(stream, "_fp", None)
    if not isinstance(raw, http.client.HTTPResponse) or getattr(body, "_amount_read", None) != 0:
        return None
    if getattr(stream, "_decoder", None) is not None or raw.getheader("Content-Encoding", "identity") != "identity":
        return None
    return raw


def read_bounded(*, key: str, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes from the start of the object: enough to tell "over the
    limit" apart from "exactly at it" without reading a large object."""
    try:
        body = open_object(key=key, first=0, last=max_bytes)
    except StorageUnavailable as exc:
        # S3 answers a range on an empty object with 416 InvalidRange.
        if exc.details.get("store_error") == "InvalidRange" and head_object(key=key) == {"size": 0}:
            return b""
        raise
    return b"".join(iter_object(body))


def list_objects(*, prefix: str) -> Iterator[dict]:
    """{"key", "size", "last_modified"} for every object under prefix."""
    paginator = client().get_paginator("list_objects_v2")
    with _translate_errors():
        for page in paginator.paginate(Bucket=bucket(), Prefix=prefix):
            for item in page.get("Contents", []):
                yield {"key": item["Key"], "size": item["Size"], "last_modified": item["LastModified"]}


def list_multipart_uploads(*, prefix: str) -> Iterator[dict]:
    """{"key", "upload_id", "initiated"} for every unfinished multipart upload under prefix."""
    paginator = client().get_paginator("list_multipart_uploads")
    with _translate_errors():
        for page in paginator.paginate(Bucket=bucket(), Prefix=prefix):
            for item in page.get("Uploads", []):
                yield {"key": item["Key"], "upload_id": item["UploadId"], "initiated": item.get("Initiated")}
