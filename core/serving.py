"""What keeps a slow or greedy client from holding the server's scarce parts.

- `ReleaseDatabaseWhileWaiting` (WSGI middleware): a request gives its database connection back
  (to the pool) before every blocking read of its body and before its response body is streamed,
  so no request holds a connection while it waits on the client.
- `idle_limited(receive)` (ASGI): a request body that sends no byte for
  MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS raises RequestTimeout (408) in the view reading it.
- `db_call`: one short ORM call from the event loop, on a small thread pool, its connection given
  back before it returns.
- `PerLoop`: one instance of something loop-bound (redis.asyncio clients, futures) per event loop.
"""

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from django.db import close_old_connections, connections

from core.bodies import RequestBody
from core.errors import RequestTimeout

# Threads (hence database connections at once) for the event loop's short reads, per process.
DB_CALL_THREADS = 4

_db_threads = ThreadPoolExecutor(max_workers=DB_CALL_THREADS, thread_name_prefix="loop-db")


T = TypeVar("T")


class PerLoop(Generic[T]):
    """`accessor()` is the running event loop's instance, made by `factory` on first use (one per
    loop: redis.asyncio clients and asyncio futures are bound to the loop that made them)."""

    def __init__(self, factory: Callable[[], T]):
        self._factory = factory
        self._instances: dict[int, T] = {}

    def __call__(self) -> T:
        loop_id = id(asyncio.get_running_loop())
        current = self._instances.get(loop_id)
        if current is None:
            current = self._instances[loop_id] = self._factory()
        return current

    def peek(self) -> T | None:
        """The running loop's instance if it has one (none is made)."""
        return self._instances.get(id(asyncio.get_running_loop()))

    def forget(self) -> T | None:
        """Drop the running loop's instance (a private loop about to close); returns it."""
        return self._instances.pop(id(asyncio.get_running_loop()), None)


async def db_call(fn, /, **kwargs):
    """Run `fn(**kwargs)` (a short ORM read) off the event loop; its database connection goes back
    to the pool (or is closed) before the result is returned."""

    def call():
        try:
            return fn(**kwargs)
        finally:
            close_old_connections()

    return await asyncio.get_running_loop().run_in_executor(_db_threads, functools.partial(call))


def release_database_connections() -> None:
    """Give back this thread's open connections, unless one is inside a transaction."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block:
            conn.close()


class _ReleasingInput:
    """wsgi.input that releases the thread's database connections before each read."""

    def __init__(self, stream):
        self._stream = stream

    def read(self, *args):
        release_database_connections()
        return self._stream.read(*args)

    def readline(self, *args):
        release_database_connections()
        return self._stream.readline(*args)

    def readlines(self, *args):
        release_database_connections()
        return self._stream.readlines(*args)

    def __iter__(self):
        release_database_connections()
        return iter(self._stream)


class ReleaseDatabaseWhileWaiting:
    """WSGI middleware around Django (see the module docstring)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if not isinstance(environ["wsgi.input"], RequestBody):  # a server's reader releases them itself
            environ["wsgi.input"] = _ReleasingInput(environ["wsgi.input"])
        response = self.app(environ, start_response)
        # The view is done; what is left is sending the body (a download, a stream) to a client
        # that may read it slowly. Streams that need the database reconnect on their own.
        release_database_connections()
        return response


def idle_limited(receive, *, seconds: float):
    """An ASGI `receive` that raises RequestTimeout when the client sends nothing for `seconds`
    while the app waits for more of the body."""

    async def limited():
        try:
            return await asyncio.wait_for(receive(), seconds)
        except TimeoutError:
            raise body_timeout(seconds) from None

    return limited


def body_timeout(seconds: float) -> RequestTimeout:
    """The 408 for a request body that sent nothing for `seconds`."""
    return RequestTimeout(f"No part of the request body arrived for {seconds:g} seconds; nothing was stored.")
