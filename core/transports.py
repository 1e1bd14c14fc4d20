"""The guarded HTTP transports (httpx2): ``GuardedTransport`` / ``AsyncGuardedTransport``, whose
every connection, redirects included (each new origin opens one), goes to the address the outbound
guard (core/outbound.py) checked for its host; the request is not rewritten, so its URL, Host
header, SNI and certificate check keep the name. They bound what a tenant's server can make us
hold: a response body (one event of an event stream) is read up to
MANGO_OUTBOUND_RESPONSE_MAX_BYTES (uncompressed: identity is asked for, anything else refused),
then the stream ends with ResponseRefused; with ``total_timeout`` every connect, read and write
ends by one deadline, so a server trickling a byte per read timeout cannot hold the caller.
"""

import contextlib
import re
import ssl
import time

import httpcore2
import httpx2
from django.conf import settings

from core.outbound import DEFAULT_PORTS, OutboundRefused, aresolve, resolve


def _target(request: httpx2.Request) -> tuple[str, int]:
    if request.url.scheme not in DEFAULT_PORTS:
        raise OutboundRefused(f"scheme {request.url.scheme} is not allowed")
    return request.url.host, request.url.port or DEFAULT_PORTS[request.url.scheme]


# --- the guarded transports ----------------------------------------------------------------------
#
# Built on httpcore2's public pieces: a connection pool whose network backend resolves and checks
# each connection's host (every new origin a redirect leads to opens one) and connects to the
# checked address. The request itself is never rewritten: its URL, Host header, SNI and
# certificate check all keep the name, and the client builds redirects against that URL.


class ResponseRefused(httpx2.ReadError):
    """A response the guard stops reading: its body is over the transport's byte limit
    (MANGO_OUTBOUND_RESPONSE_MAX_BYTES), or compressed although the request asked for none."""


class _Deadline:
    """The instant (time.monotonic()) after which a transport does no more I/O, if any: every
    connect, TLS handshake, read and write waits at most until then, so a server that trickles a
    byte just inside each read timeout still cannot hold the caller past it."""

    def __init__(self, seconds: float | None):
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self, timeout: float | None, error: type[Exception]) -> float | None:
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise error("the overall deadline of the outbound request passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream, deadline: _Deadline):
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> "_Stream":
        timeout = self._deadline.left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._deadline)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _AsyncStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream, deadline: _Deadline):
        self._inner = inner
        self._deadline = deadline

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, self._deadline.left(timeout, httpcore2.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, self._deadline.left(timeout, httpcore2.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> "_AsyncStream":
        timeout = self._deadline.left(timeout, httpcore2.ConnectTimeout)
        return _AsyncStream(await self._inner.start_tls(ssl_context, server_hostname, timeout), self._deadline)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """TCP to the checked address of each connection's host:port (OutboundRefused otherwise)."""

    def __init__(self, deadline: _Deadline):
        self._inner = httpcore2.SyncBackend()
        self._deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None) -> _Stream:
        address = resolve(host, port)[0]
        timeout = self._deadline.left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(address, port, timeout, local_address, socket_options), self._deadline)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundRefused("a Unix socket is not an outbound destination")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, deadline: _Deadline):
        self._inner = httpcore2.AnyIOBackend()
        self._deadline = deadline

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None) -> _AsyncStream:
        address = (await aresolve(host, port))[0]
        timeout = self._deadline.left(timeout, httpcore2.ConnectTimeout)
        stream = await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
        return _AsyncStream(stream, self._deadline)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundRefused("a Unix socket is not an outbound destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore2's errors as httpx2's (what callers of an httpx2 client catch), most specific first.
_ERRORS = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
    (httpcore2.ProxyError, httpx2.ProxyError),
)


@contextlib.contextmanager
def _httpx_errors():
    try:
        yield
    except Exception as exc:
        for core, mapped in _ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


def _core_request(request: httpx2.Request) -> httpcore2.Request:
    """The request for httpcore2, unchanged but for Accept-Encoding: identity (a compressed body
    would grow past the byte limit only after the transport counted it)."""
    _target(request)
    headers = [(name, value) for name, value in request.headers.raw if name.lower() != b"accept-encoding"]
    headers.append((b"Accept-Encoding", b"identity"))
    url = httpcore2.URL(
        scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port, target=request.url.raw_path
    )
    return httpcore2.Request(
        method=request.method, url=url, headers=headers, content=request.stream, extensions=request.extensions
    )


def _encoding_refused(headers) -> ResponseRefused | None:
    encodings = [
        value.decode("latin-1").strip().lower() for name, value in headers if name.lower() == b"content-encoding"
    ]
    if any(encoding not in ("", "identity") for encoding in encodings):
        return ResponseRefused(f"the response is compressed ({', '.join(encodings)}) although identity was asked")
    return None


class _Held:
    """What a response makes the reader hold, counted against the limit: the whole body, or for
    a successful event stream (a 2xx text/event-stream, which MCP keeps open for a connection's
    life and its readers parse event by event, each bounded) the bytes since the last event
    ended, so a long-lived stream of small events stays open. A redirect's or an error's body is
    counted whole whatever its type: the client reads those whole."""

    _END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # a blank line ends an event

    def __init__(self, status: int, headers, limit: int):
        content_type = next((value for name, value in headers if name.lower() == b"content-type"), b"")
        event_stream = content_type.split(b";", 1)[0].strip().lower() == b"text/event-stream"
        self._events = 200 <= status < 300 and event_stream
        self._limit = limit
        self._held = 0
        self._tail = b""  # the last bytes seen (counted already), for an end split across chunks

    def add(self, chunk: bytes) -> None:
        if not self._events:
            self._held += len(chunk)
            return self._check()
        data = self._tail + chunk
        start = len(self._tail)
        for end in self._END.finditer(data):
            if end.end() <= len(self._tail):
                continue
            self._held += end.end() - start
            self._check()
            self._held, start = 0, end.end()
        self._held += len(data) - start
        self._tail = data[-3:]
        return self._check()

    def _check(self) -> None:
        if self._held > self._limit:
            what = "event" if self._events else "response body"
            raise ResponseRefused(f"the {what} is over {self._limit} bytes (MANGO_OUTBOUND_RESPONSE_MAX_BYTES)")


class _Body(httpx2.SyncByteStream):
    def __init__(self, inner, held: _Held):
        self._inner = inner
        self._held = held

    def __iter__(self):
        with _httpx_errors():
            for chunk in self._inner:
                self._held.add(chunk)
                yield chunk

    def close(self) -> None:
        with _httpx_errors():
            self._inner.close()


class _AsyncBody(httpx2.AsyncByteStream):
    def __init__(self, inner, held: _Held):
        self._inner = inner
        self._held = held

    async def __aiter__(self):
        with _httpx_errors():
            async for chunk in self._inner:
                self._held.add(chunk)
                yield chunk

    async def aclose(self) -> None:
        with _httpx_errors():
            await self._inner.aclose()


def _pool_options(verify, backend) -> dict:
    """One set of pool settings for the sync and the async transport; `backend` pins and bounds."""
    context = verify if isinstance(verify, ssl.SSLContext) else httpx2.create_ssl_context(verify=verify)
    return {
        "ssl_context": context,
        "max_connections": 100,
        "max_keepalive_connections": 20,
        "keepalive_expiry": 5.0,
        "network_backend": backend,
    }


class GuardedTransport(httpx2.BaseTransport):
    """`total_timeout`: every request through this transport ends within that many seconds of its
    creation (for one exchange: a token refresh, a probe). `max_response_bytes`: the most of one
    response body it reads (default MANGO_OUTBOUND_RESPONSE_MAX_BYTES)."""

    def __init__(self, *, verify=True, total_timeout: float | None = None, max_response_bytes: int | None = None):
        self._limit = max_response_bytes or settings.MANGO_OUTBOUND_RESPONSE_MAX_BYTES
        self._pool = httpcore2.ConnectionPool(**_pool_options(verify, _Backend(_Deadline(total_timeout))))

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        with _httpx_errors():
            response = self._pool.handle_request(_core_request(request))
        if (refused := _encoding_refused(response.headers)) is not None:
            response.close()
            raise refused
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream, _Held(response.status, response.headers, self._limit)),
            extensions=response.extensions,
        )

    def close(self) -> None:
        with _httpx_errors():
            self._pool.close()


class AsyncGuardedTransport(httpx2.AsyncBaseTransport):
    """GuardedTransport for asyncio (the worker's MCP connections)."""

    def __init__(self, *, verify=True, total_timeout: float | None = None, max_response_bytes: int | None = None):
        self._limit = max_response_bytes or settings.MANGO_OUTBOUND_RESPONSE_MAX_BYTES
        self._pool = httpcore2.AsyncConnectionPool(**_pool_options(verify, _AsyncBackend(_Deadline(total_timeout))))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with _httpx_errors():
            response = await self._pool.handle_async_request(_core_request(request))
        if (refused := _encoding_refused(response.headers)) is not None:
            await response.aclose()
            raise refused
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_AsyncBody(response.stream, _Held(response.status, response.headers, self._limit)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        with _httpx_errors():
            await self._pool.aclose()
