"""The stream for WSGI-only servers (the test live server, runserver; not a production layout —
docs/operating.md "Serving"): the ASGI view runs on an event loop private to the request's thread, and its
messages become a Django streaming response.

A WSGI server learns that a client left only when a write fails, i.e. at the next heartbeat. So
that a stream (and its feed's database reads) stops as soon as the client closes, the private loop
watches the client's socket when it can find it and treats end-of-file as `http.disconnect`."""

import asyncio
import contextlib
import os
import socket
import stat

from django.http import HttpResponse, StreamingHttpResponse

from core import caps
from sessions.streams.endpoint import stream_endpoint
from sessions.streams.hub import close_hub


def _scope_from_request(request) -> dict:
    headers = []
    for key, value in request.META.items():
        if key.startswith("HTTP_"):
            headers.append((key[5:].lower().replace("_", "-").encode("latin-1"), str(value).encode("latin-1")))
    return {
        "type": "http",
        "method": request.method,
        "path": request.path,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "mango.request_id": getattr(request, "request_id", None),
    }


def _client_socket_fd(environ) -> int | None:
    """The client socket under `wsgi.input`, through the wrappers of core.serving and Django's
    servers (their LimitedStream keeps only the bound `read`); None when there is none to find."""
    stream = environ.get("wsgi.input")
    for _ in range(8):
        if stream is None:
            return None
        with contextlib.suppress(Exception):
            fd = stream.fileno()
            if isinstance(fd, int) and stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        stream = (
            getattr(stream, "_stream", None)
            or getattr(getattr(stream, "_read", None), "__self__", None)
            or getattr(stream, "raw", None)
        )
    return None


def _peer_closed(fd: int) -> bool:
    """Whether the client closed its end (readable with nothing to read, or reset)."""
    try:
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class _PrivateLoop:
    """Runs stream_endpoint on an event loop owned by this thread (a WSGI request)."""

    def __init__(self, scope: dict, client_fd: int | None):
        self.loop = asyncio.new_event_loop()
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.disconnected = self.loop.create_future()
        self.client_fd = client_fd
        if client_fd is not None:
            self.loop.add_reader(client_fd, self._client_readable)
        self.task = self.loop.create_task(stream_endpoint(scope, self._receive, self._send))

    def _client_readable(self) -> None:
        # A client waiting for its response sends nothing: readable means it closed (or sent a
        # pipelined request, which cannot tell us anything: stop watching then).
        self._stop_watching()
        if _peer_closed(self.client_fd) and not self.disconnected.done():
            self.disconnected.set_result(None)

    def _stop_watching(self) -> None:
        if self.client_fd is not None:
            self.loop.remove_reader(self.client_fd)

    async def _receive(self):
        await self.disconnected
        return {"type": "http.disconnect"}

    async def _send(self, message) -> None:
        await self.outbox.put(message)

    def next_message(self) -> dict | None:
        get = self.loop.create_task(self.outbox.get())
        self.loop.run_until_complete(asyncio.wait({get, self.task}, return_when=asyncio.FIRST_COMPLETED))
        if get.done():
            return get.result()
        get.cancel()
        self.task.result()  # raises what ended the endpoint
        return None

    def body(self):
        try:
            while True:
                message = self.next_message()
                if message is None:
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    return
        finally:
            self.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self._stop_watching()
        if not self.disconnected.done():
            self.disconnected.set_result(None)
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.task, 10))
        except BaseException:  # noqa: BLE001 — closing: nothing left to report to
            pass
        self.loop.run_until_complete(self._shutdown())
        self.loop.close()

    async def _shutdown(self) -> None:
        await close_hub()
        gate = caps.gate()
        caps.gate.forget()
        with contextlib.suppress(Exception):
            await gate.redis.aclose()
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def event_stream_view(request, session_id: str, thread_id: str | None = None):
    """For WSGI servers: the ASGI view on a private loop, its messages as a Django response."""
    private = _PrivateLoop(_scope_from_request(request), _client_socket_fd(request.environ))
    start = private.next_message()
    if start is None or start["type"] != "http.response.start":
        private.close()
        raise RuntimeError("the stream endpoint sent no response")
    headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in start["headers"]]
    content_type = dict(headers).get("content-type")
    if start["status"] != 200:
        body = b"".join(private.body())
        response = HttpResponse(body, status=start["status"], content_type=content_type)
    else:
        response = StreamingHttpResponse(private.body(), status=start["status"], content_type=content_type)
    for name, value in headers:
        if name not in ("content-type", "content-length"):
            response[name] = value
    return response
