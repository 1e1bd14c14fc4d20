"""A WSGI request served from the event loop with the fewest hops for a large response body:
config.asgi uses it for File downloads (`GET /v1/files/{id}/content`).

Django runs as it does for every other route (all middleware: request-id, metrics, errors,
headers) in a thread of the API pool. The view's response carries its open object-store stream
as `file_to_stream`; `wsgi.file_wrapper` (WSGI's hook for "let the server send this file")
hands that stream back here instead of an iterator, and the same thread then moves the body:

- spliced (Linux splice(2)): when the server offers the `mango.splice` extension
  (config/uvicorn.py: the client connection, once the headers are out) and the stream offers
  its store socket (files.storage.ObjectStream.splice_source), the bytes go from the store's
  socket through a pipe to the client's socket without being copied into this process;
- else read in the view's block size (DOWNLOAD_CHUNK_BYTES), each chunk queued to the loop
  without waiting for it (at most `depth` queued: bounded memory). a2wsgi's per-chunk path
  instead blocks the thread for a loop round trip per chunk.

When the client disconnects, the store stream is aborted (its socket shut down, so a blocked
read returns at once), the thread stops and the response is closed (Django's close: the store
connection is closed, request_finished fires). a2wsgi would read the store on to the end.
"""

import asyncio
import concurrent.futures
import contextlib
import contextvars
import fcntl
import logging
import os
import select
import threading

from a2wsgi.wsgi import Body, build_environ

logger = logging.getLogger(__name__)

_END = object()
_CLIENT_GONE = object()
# Bytes moved per splice(2) call (the pipe between the two sockets is grown to this size; 1 MiB
# is Linux's default limit for unprivileged processes).
PIPE_BYTES = 1024 * 1024
# A store that sends nothing for this long fails the download (botocore's read timeout).
STORE_IDLE_SECONDS = 60.0
_POLL_MS = 250
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK if hasattr(os, "splice") else 0


class FileWrapper:
    """wsgi.file_wrapper: marks the response as a file for this module to stream."""

    def __init__(self, filelike, block_size: int = 1024 * 1024):
        self.filelike = filelike
        self.block_size = block_size

    def __iter__(self):  # WSGI requires the wrapper to be iterable (not used here)
        return iter(lambda: self.filelike.read(self.block_size), b"")

    def close(self) -> None:
        self.filelike.close()


class _Gone(Exception):
    """The loop stopped taking chunks (the client went away or sending failed)."""


class _Channel:
    """Thread → loop handoff: put() never waits for the loop, only for a free slot."""

    def __init__(self, loop: asyncio.AbstractEventLoop, depth: int, *, splice: bool):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.slots = threading.Semaphore(depth)
        self.stopped = False
        self.filelike = None
        self.splice = splice

    def put(self, item) -> None:
        self.slots.acquire()
        if self.stopped:
            raise _Gone
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def put_final(self, item) -> None:
        """End or error: always delivered, never waits."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def stop(self) -> None:
        """From the loop: the thread stops at its next put(), read or wait."""
        if self.stopped:
            return
        self.stopped = True
        self.slots.release()
        abort = getattr(self.filelike, "abort", None)
        if abort is not None:
            abort()

    def client_socket(self) -> int | None:
        """From the thread: a descriptor of the client's connection (a dup, so it stays this
        connection's even if the server closes its own), once the response headers have gone
        out; None when the server cannot hand it over."""
        answer: concurrent.futures.Future = concurrent.futures.Future()
        self.put(("splice", answer))
        while True:
            try:
                return answer.result(timeout=_POLL_MS / 1000)
            except concurrent.futures.TimeoutError:
                if self.stopped:
                    answer.add_done_callback(_close_answer)  # if it comes after all
                    raise _Gone from None


def _close_answer(answer: concurrent.futures.Future) -> None:
    if not answer.cancelled() and answer.exception() is None and answer.result() is not None:
        os.close(answer.result())


def _run(app, environ, channel: _Channel) -> None:
    """In a pool thread: the WSGI app, then its body into the channel."""
    try:

        def start_response(status, headers, exc_info=None):
            channel.put(("start", status, headers))

        result = app(environ, start_response)
        try:
            if isinstance(result, FileWrapper):
                _send_file(result, channel)
            else:
                for chunk in result:
                    if chunk:
                        channel.put(chunk)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        channel.put_final(_END)
    except _Gone:
        channel.put_final(_END)
    except (BrokenPipeError, ConnectionResetError):
        channel.put_final(_CLIENT_GONE)
    except BaseException as exc:  # noqa: BLE001 — raised again on the loop
        if channel.stopped:
            channel.put_final(_END)  # the read failed because the stream was aborted
        else:
            channel.put_final(exc)


def _send_file(wrapper: FileWrapper, channel: _Channel) -> None:
    filelike = channel.filelike = wrapper.filelike
    if channel.stopped:
        raise _Gone
    if channel.splice and getattr(filelike, "spliceable", False):
        target = channel.client_socket()
        if target is not None:
            try:
                source, head, count = filelike.splice_source()
                _write_all(target, head, channel)
                _splice(source, target, count, channel)
                filelike.spliced(count)
            finally:
                os.close(target)
            channel.put_final(("spliced", len(head) + count))
            return
    read, size = filelike.read, wrapper.block_size
    while chunk := read(size):
        channel.put(chunk)


def _wait(fd: int, events: int, channel: _Channel, timeout: float | None) -> None:
    poller = select.poll()
    poller.register(fd, events)
    waited = 0.0
    while not poller.poll(_POLL_MS):
        if channel.stopped:
            raise _Gone
        waited += _POLL_MS / 1000
        if timeout is not None and waited >= timeout:
            raise TimeoutError(f"the object store sent nothing for {timeout:g} seconds")
    if channel.stopped:
        raise _Gone


def _write_all(target: int, data: bytes, channel: _Channel) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(target, view) :]
        except BlockingIOError:
            _wait(target, select.POLLOUT, channel, None)


def _splice(source: int, target: int, count: int, channel: _Channel) -> None:
    """`count` bytes from the source socket to the target socket through a pipe (both sockets
    are non-blocking: poll for each side, stopping as soon as the channel is stopped)."""
    pipe_out, pipe_in = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe_in, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        while count:
            try:
                moved = os.splice(source, pipe_in, min(count, PIPE_BYTES), flags=_SPLICE_FLAGS)
            except BlockingIOError:
                _wait(source, select.POLLIN, channel, STORE_IDLE_SECONDS)
                continue
            if not moved:
                raise ConnectionAbortedError("the object store ended the body early")
            count -= moved
            while moved:
                try:
                    moved -= os.splice(pipe_out, target, moved, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    _wait(target, select.POLLOUT, channel, None)
    finally:
        os.close(pipe_in)
        os.close(pipe_out)


async def serve(app, executor, scope, receive, send, *, depth: int = 2, splice: bool = True) -> None:
    """Serve one HTTP request with the WSGI `app`, in a thread of `executor` (module docstring);
    `splice=False` always reads the body in chunks."""
    loop = asyncio.get_running_loop()
    sink = scope.get("extensions", {}).get("mango.splice")
    channel = _Channel(loop, depth, splice=splice and sink is not None and _SPLICE_FLAGS != 0)
    environ = build_environ(scope, Body(loop, receive))
    environ["wsgi.file_wrapper"] = FileWrapper
    context = contextvars.copy_context()
    done = loop.run_in_executor(executor, context.run, _run, app, environ, channel)
    watcher = None
    try:
        while True:
            item = await channel.queue.get()
            if item is _END:
                break
            if item is _CLIENT_GONE:
                # The disconnect is about to arrive: let it, so the response ends as abandoned.
                if watcher is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(watcher), 2)
                return
            if isinstance(item, BaseException):
                raise item
            if type(item) is tuple and item[0] == "start":
                await send(_start_message(*item[1:]))
                # From here on the request body is not read: the next message is the disconnect.
                watcher = asyncio.ensure_future(_until_disconnect(receive, channel))
            elif type(item) is tuple and item[0] == "splice":
                item[1].set_result(None if channel.stopped else await sink.client_socket())
            elif type(item) is tuple and item[0] == "spliced":
                sink.sent(item[1])
                continue  # the thread's final message: it holds no slot
            else:
                await send({"type": "http.response.body", "body": item, "more_body": True})
            if channel.stopped:
                return
            channel.slots.release()
        await send({"type": "http.response.body", "body": b""})
    finally:
        channel.stop()
        if watcher is not None:
            watcher.cancel()
        await done


def _start_message(status: str, headers: list[tuple[str, str]]) -> dict:
    return {
        "type": "http.response.start",
        "status": int(status.split(" ", 1)[0]),
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers],
    }


async def _until_disconnect(receive, channel: _Channel) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    channel.stop()
    channel.put_final(_END)
