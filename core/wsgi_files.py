"""A WSGI request served from the event loop with the fewest hops for a large response body:
config.asgi uses it for File downloads (`GET /v1/files/{id}/content`).

Django runs as it does for every other route (all middleware: request-id, metrics, errors,
headers) in a thread of the API pool. The view's response carries its open object-store stream
as `file_to_stream`; `wsgi.file_wrapper` (WSGI's hook for "let the server send this file")
hands that stream back here instead of an iterator, and the same thread then reads it in the
view's block size (DOWNLOAD_CHUNK_BYTES) and queues each chunk to the loop without waiting for
it (at most `depth` chunks queued: bounded memory). a2wsgi's per-chunk path instead blocks the
thread for a loop round trip per chunk, and keeps reading the store after the client has gone.

When the client disconnects, the store stream is aborted (its socket shut down, so a blocked
read returns at once), the thread stops and the response is closed (Django's close: the store
connection is closed, request_finished fires).
"""

import asyncio
import contextvars
import logging
import threading

from a2wsgi.wsgi import Body, build_environ

logger = logging.getLogger(__name__)

_END = object()


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

    def __init__(self, loop: asyncio.AbstractEventLoop, depth: int):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.slots = threading.Semaphore(depth)
        self.stopped = False
        self.filelike = None

    def put(self, item) -> None:
        self.slots.acquire()
        if self.stopped:
            raise _Gone
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def put_final(self, item) -> None:
        """End or error: always delivered, never waits."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def stop(self) -> None:
        """From the loop: the thread stops at its next put() or read."""
        if self.stopped:
            return
        self.stopped = True
        self.slots.release()
        abort = getattr(self.filelike, "abort", None)
        if abort is not None:
            abort()


def _run(app, environ, channel: _Channel) -> None:
    """In a pool thread: the WSGI app, then its body into the channel."""
    try:

        def start_response(status, headers, exc_info=None):
            channel.put(("start", status, headers))

        result = app(environ, start_response)
        try:
            if isinstance(result, FileWrapper):
                channel.filelike = result.filelike
                if channel.stopped:
                    raise _Gone
                read, size = result.filelike.read, result.block_size
                while chunk := read(size):
                    channel.put(chunk)
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
    except BaseException as exc:  # noqa: BLE001 — raised again on the loop
        if channel.stopped:
            channel.put_final(_END)  # the read failed because the stream was aborted
        else:
            channel.put_final(exc)


async def serve(app, executor, scope, receive, send, *, depth: int = 2) -> None:
    """Serve one HTTP request with the WSGI `app`, in a thread of `executor` (module docstring)."""
    loop = asyncio.get_running_loop()
    channel = _Channel(loop, depth)
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
            if isinstance(item, BaseException):
                raise item
            if type(item) is tuple:
                await send(_start_message(*item[1:]))
                # From here on the request body is not read: the next message is the disconnect.
                watcher = asyncio.ensure_future(_until_disconnect(receive, channel))
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
