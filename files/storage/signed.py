"""The fast backend: the plain one, except that the two hot requests (UploadPart, GetObject) go
to the store as one signed request each on a kept-alive http.client connection instead of
through botocore's request pipeline.

botocore takes each call through parameter validation, serialisation, a score of event hooks,
its retry handler, urllib3's pool (and, for a part, an `Expect: 100-continue` round trip): ~2-3
ms of CPU a call. That is ~0.5 CPU s/GB of an upload at 5 MiB parts, and a third of what a
download costs the server before its first byte (bench/files_throughput.py). Here the request is
the same one (same headers and checksum), signed by botocore's SigV4 signer (botocore.auth, a
public module) with the credentials of the client's boto3 session (Session.get_credentials(),
refreshed when they expire), and an error answer is read as botocore reads it: `<Code>` of the
XML body. Retries follow the client's standard mode: a connection error, 5xx or throttling is
tried again (3 attempts, jittered backoff); a kept-alive connection the store closed while it sat
idle is replaced at once. A GET's body is the store's http.client response itself, so a server
can splice(2) it from the connection's socket to its client's.

Chosen (files/storage/__init__.py) when the store is reached over plain http, path-style,
without a proxy, with credentials, and MANGO_FILE_S3_RAW_REQUESTS is on.
"""

import contextlib
import http.client
import random
import re
import socket
import threading
import time
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError

from files.storage.base import ObjectStream, StorageObjectMissing, body_checksum, unavailable
from files.storage.boto import MISSING_CODES, Boto3Backend

ATTEMPTS = 3
_RETRY_STATUS = {429, 500, 502, 503, 504}
_RETRY_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"}
_CODE = re.compile(rb"<Code>([^<]{1,128})</Code>")


def signable(client, credentials) -> bool:
    """Whether requests to the client's store can be signed and sent here as the client would."""
    config = client.meta.config
    return (
        (client.meta.endpoint_url or "").startswith("http://")
        and not config.proxies
        and (config.s3 or {}).get("addressing_style") == "path"
        and credentials is not None
    )


class SignedS3Backend(Boto3Backend):
    """Boto3Backend with UploadPart and GetObject sent as signed requests (module docstring)."""

    def __init__(self, *, client, credentials, bucket: str):
        super().__init__(client=client, credentials=credentials, bucket=bucket)
        endpoint = urlsplit(client.meta.endpoint_url)
        self.netloc = endpoint.netloc
        self.host, self.port = endpoint.hostname, endpoint.port or 80
        self.base_url = f"http://{self.netloc}"
        config = client.meta.config
        self.connect_timeout = config.connect_timeout
        self.read_timeout = config.read_timeout
        self.pool_size = config.max_pool_connections or 10
        self.region = client.meta.region_name
        # Part threads each keep one connection; GETs share a pool of idle ones.
        self._part_connections = threading.local()
        self._idle: list[http.client.HTTPConnection] = []
        self._idle_lock = threading.Lock()

    def object_path(self, key: str) -> str:
        return f"/{quote(self.bucket, safe='')}/{quote(key, safe='/-_.~')}"

    # --- UploadPart, on a connection of the calling (part) thread's own ----------------------

    def multipart_upload_part(self, *, key: str, upload_id: str, part_number: int, body) -> dict:
        checksum = body_checksum(body)
        etag = self.send_part(key=key, upload_id=upload_id, part_number=part_number, body=body, checksum=checksum)
        return {"ETag": etag, "ChecksumCRC32C": checksum}

    def send_part(self, *, key: str, upload_id: str, part_number: int, body, checksum: str) -> str:
        """The part's ETag. StorageObjectMissing when the upload is gone, StorageUnavailable for
        anything else the store refuses (a `checksum` that does not match: BadDigest) or cannot
        be reached for."""
        target = f"{self.object_path(key)}?partNumber={part_number}&uploadId={quote(upload_id, safe='')}"
        headers = {"Content-Length": str(len(body)), "x-amz-checksum-crc32c": checksum}
        for attempt in range(1, ATTEMPTS + 1):
            try:
                status, etag, code = self._put(target, headers, body)
            except (OSError, http.client.HTTPException, BotoCoreError) as exc:  # BotoCoreError: credentials
                self._drop_part_connection()
                _give_up_if_last(attempt, exc)
            else:
                if status == 200 and etag:
                    return etag
                _give_up_unless_retryable(attempt, status, code)
            _backoff(attempt)
        raise AssertionError("unreachable")

    def _put(self, target: str, headers: dict, body) -> tuple[int, str | None, str | None]:
        reused = getattr(self._part_connections, "conn", None) is not None
        conn, response = self._send_fresh_if_stale(self.part_connection(), reused, "PUT", target, headers, body)
        self._part_connections.conn = conn
        code = _error_code(response) if response.status != 200 else None
        if response.status == 200:
            response.read()
        if response.will_close or not response.isclosed():
            self._drop_part_connection()
        return response.status, response.getheader("ETag"), code

    def part_connection(self) -> http.client.HTTPConnection:
        """The calling thread's connection for parts (made on first use)."""
        conn = getattr(self._part_connections, "conn", None)
        if conn is None:
            conn = self._part_connections.conn = self._new_connection()
        return conn

    def _drop_part_connection(self) -> None:
        conn = getattr(self._part_connections, "conn", None)
        self._part_connections.conn = None
        if conn is not None:
            conn.close()

    # --- GetObject, on a pooled connection -----------------------------------------------------

    def open_object(self, *, key: str, first: int | None, last: int | None, chunk_size: int) -> ObjectStream:
        headers = {}
        if first is not None:
            headers["Range"] = f"bytes={first}-{'' if last is None else last}"
        target = self.object_path(key)
        for attempt in range(1, ATTEMPTS + 1):
            conn = None
            try:
                conn, reused = self._take_idle()
                conn, response = self._send_fresh_if_stale(conn, reused, "GET", target, headers)
                if response.status in (200, 206):
                    return SignedObjectStream(response, conn, self, chunk_size=chunk_size)
                code = _error_code(response)
            except (OSError, http.client.HTTPException, BotoCoreError) as exc:  # BotoCoreError: credentials
                if conn is not None:
                    conn.close()
                _give_up_if_last(attempt, exc)
            else:
                self.give_back(conn, response)
                _give_up_unless_retryable(attempt, response.status, code)
            _backoff(attempt)
        raise AssertionError("unreachable")

    def idle_connections(self) -> int:
        with self._idle_lock:
            return len(self._idle)

    def _take_idle(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._idle_lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new_connection(), False

    def give_back(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """The response was read to its end: keep the connection for the next GET if it may be."""
        if response.will_close or not response.isclosed():
            conn.close()
            return
        with self._idle_lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    # --- one signed request ----------------------------------------------------------------------

    def _new_connection(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        conn.connect()
        conn.sock.settimeout(self.read_timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _send_request(self, conn, method: str, target: str, headers: dict, body=None) -> http.client.HTTPResponse:
        """Sign and send; the response with its status line and headers read."""
        request = AWSRequest(method=method, url=self.base_url + target, headers=headers, data=body)
        request.context["client_config"] = self.client.meta.config  # payload signing as configured
        S3SigV4Auth(self.credentials.get_frozen_credentials(), "s3", self.region).add_auth(request)
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
        it sat idle fails at once: the request is sent again on a new one (both requests sent
        this way are idempotent)."""
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


def _give_up_unless_retryable(attempt: int, status: int, code: str | None) -> None:
    """After an error answer: StorageObjectMissing, StorageUnavailable, or return to retry."""
    if code in MISSING_CODES or status == 404:
        raise StorageObjectMissing(code or "404")
    if attempt == ATTEMPTS or not (status in _RETRY_STATUS or code in _RETRY_CODES):
        raise unavailable(code or str(status))


def _give_up_if_last(attempt: int, exc: Exception) -> None:
    """After the store could not be reached (or answered nothing usable)."""
    if attempt == ATTEMPTS:
        raise unavailable(type(exc).__name__, exc) from exc


def _error_code(response: http.client.HTTPResponse) -> str | None:
    found = _CODE.search(response.read(64 * 1024))
    return found.group(1).decode("ascii", "replace") if found else None


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.1 * 2**attempt))


class SignedObjectStream(ObjectStream):
    """A GET's body: the store's http.client response on the backend's connection. Each chunk is
    one read of it (the bytes arrive in a fresh bytes object with the kernel's one copy and go
    to the client socket as they are). Read to its end, the connection goes back to the
    backend's idle pool (a download then costs no new TCP connection to the store: ~1 ms of the
    ~5 ms a download spends before its first byte); closed early, it is closed."""

    def __init__(self, response: http.client.HTTPResponse, conn, backend: SignedS3Backend, *, chunk_size: int):
        self.chunk_size = chunk_size
        self._response = response
        self._conn = conn
        self._backend = backend
        self._expected = response.length
        self._received = 0
        self._lock = threading.Lock()  # release/close vs abort() from another thread

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.chunk_size
        try:
            chunk = self._response.read(size)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise unavailable(type(exc).__name__, exc) from exc
        if chunk:
            self._received += len(chunk)
        elif self._expected is not None and self._received != self._expected:
            raise unavailable("IncompleteRead")
        else:
            self._release()
        return chunk

    @property
    def spliceable(self) -> bool:
        response, conn = self._response, self._conn
        if conn is None or response.fp is None or self._received or response.chunked or not response.length:
            return False
        if response.getheader("Content-Encoding", "identity") != "identity":
            return False
        return type(conn.sock) is socket.socket  # an ssl.SSLSocket's bytes are ciphertext

    def splice_source(self) -> tuple[int, bytes, int] | None:
        if not self.spliceable:
            return None
        response, length = self._response, self._response.length
        try:
            # What http.client's buffered reader already holds of the body, without a new read.
            head = response.fp.read1(min(len(response.fp.peek(1)), length))
        except (OSError, ValueError) as exc:
            raise unavailable(type(exc).__name__, exc) from exc
        if not head:
            raise unavailable("IncompleteRead")
        self._received = len(head)
        return self._conn.sock.fileno(), head, length - len(head)

    def spliced(self, count: int) -> None:
        """The body was read whole: the response is done and its connection can serve again."""
        self._received += count
        if self._received == self._expected:
            with self._lock:
                self._response.close()  # what http.client does itself once it read the last byte
            self._release()

    def _release(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                self._backend.give_back(conn, self._response)

    def abort(self) -> None:
        """Shut the store connection down: a read blocked on it returns at once."""
        with self._lock:
            sock = self._conn.sock if self._conn is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._response.close()
            if conn is not None:
                conn.close()
