"""Each workspace's share of an API process's request threads.

A process serves Django views on a pool of MANGO_API_THREADS threads. Without shares, one tenant
sending hundreds of concurrent requests (or holding long downloads) would take every thread and
the others would wait behind it. Here each workspace may have at most
MANGO_WORKSPACE_MAX_REQUESTS requests on this process's threads at once; its further requests
wait on the event loop, in order, holding no thread and no database connection, for at most
MANGO_WORKSPACE_REQUEST_WAIT_SECONDS and at most MANGO_WORKSPACE_MAX_WAITING_REQUESTS of them
(beyond either: 429 `rate_limit_error` with `retry-after`). Requests that name no valid key share
one bucket of their own, so an anonymous flood is bounded the same way.

The share is per process because the threads are: a share below MANGO_API_THREADS always leaves
threads for every other workspace. (Uploads and event streams have fleet-wide caps of their own,
core.caps.)

Large request bodies have a budget of their own: Django holds a JSON body in memory while it
parses and answers it (eight 26 MB event POSTs at once took a worker from 95 MB to 1.3 GB), so a
request whose
body exceeds LARGE_BODY_BYTES first takes its size from MANGO_LARGE_BODIES_BUDGET_BYTES (per
process, first come first served, waiting as above, then 429). Small requests never wait for it,
and uploads (which stream to the store) do not count.

Which workspace a request belongs to is read from its API key, remembered per process for
WORKSPACE_CACHE_SECONDS; it only picks the bucket. Django still authenticates every request.
"""

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict, deque
from contextlib import asynccontextmanager

from django.conf import settings

from core.auth import api_key_authenticate_meta, raw_key_from_meta
from core.errors import AuthenticationFailed, RateLimited
from core.serving import PerLoop, db_call

logger = logging.getLogger(__name__)

ANONYMOUS = "-"  # the bucket of requests without a valid key
# Bodies above this take their size from the large-bodies budget.
LARGE_BODY_BYTES = 1024 * 1024
WORKSPACE_CACHE_SECONDS = 30.0
WORKSPACE_CACHE_ENTRIES = 10_000
RETRY_AFTER_SECONDS = 2


class _Bucket:
    __slots__ = ("running", "waiters")

    def __init__(self):
        self.running = 0
        self.waiters: list[asyncio.Future] = []


class Shares:
    """The buckets of one event loop (one API process)."""

    def __init__(self):
        self._buckets: dict[str, _Bucket] = {}
        self._workspaces: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._bodies: _ByteBudget | None = None

    async def workspace_of(self, meta: dict) -> str:
        """The workspace id the request's key names, or ANONYMOUS (missing, invalid, or the
        database could not say: Django answers those)."""
        raw_key = raw_key_from_meta(meta)
        if not raw_key:
            return ANONYMOUS
        digest = hashlib.sha256(raw_key.encode()).hexdigest()
        now = time.monotonic()
        cached = self._workspaces.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        workspace_id = await db_call(_lookup, meta=meta)
        self._workspaces[digest] = (now + WORKSPACE_CACHE_SECONDS, workspace_id)
        self._workspaces.move_to_end(digest)
        while len(self._workspaces) > WORKSPACE_CACHE_ENTRIES:
            self._workspaces.popitem(last=False)
        return workspace_id

    @asynccontextmanager
    async def share(self, workspace_id: str):
        """Holds one of the workspace's places on this process's threads (waiting for one if
        need be), or raises ShareRefused before the body runs."""
        limit = settings.MANGO_WORKSPACE_MAX_REQUESTS
        if limit <= 0:
            yield
            return
        bucket = self._buckets.setdefault(workspace_id, _Bucket())
        if bucket.running >= limit or bucket.waiters:
            await self._wait(bucket, workspace_id, limit)
        else:
            bucket.running += 1
        try:
            yield
        finally:
            self._leave(bucket, workspace_id)

    async def _wait(self, bucket: _Bucket, workspace_id: str, limit: int) -> None:
        if len(bucket.waiters) >= settings.MANGO_WORKSPACE_MAX_WAITING_REQUESTS:
            self._drop_if_idle(bucket, workspace_id)
            raise _refused(limit)
        turn = asyncio.get_running_loop().create_future()
        bucket.waiters.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), settings.MANGO_WORKSPACE_REQUEST_WAIT_SECONDS)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if turn.done() and not turn.cancelled():  # handed a place as we gave up: pass it on
                self._leave(bucket, workspace_id)
            else:
                turn.cancel()
                bucket.waiters.remove(turn)
                self._drop_if_idle(bucket, workspace_id)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise _refused(limit) from None

    def _leave(self, bucket: _Bucket, workspace_id: str) -> None:
        """A place is free: the oldest waiter takes it over (running stays), else it is given up."""
        while bucket.waiters:
            turn = bucket.waiters.pop(0)
            if not turn.done():
                turn.set_result(None)
                return
        bucket.running -= 1
        self._drop_if_idle(bucket, workspace_id)

    def _drop_if_idle(self, bucket: _Bucket, workspace_id: str) -> None:
        if bucket.running == 0 and not bucket.waiters and self._buckets.get(workspace_id) is bucket:
            del self._buckets[workspace_id]

    @asynccontextmanager
    async def body_budget(self, size: int):
        """Holds `size` bytes of this process's budget for large bodies while the request runs
        (nothing for a body up to LARGE_BODY_BYTES), or raises ShareRefused."""
        budget = settings.MANGO_LARGE_BODIES_BUDGET_BYTES
        if size <= LARGE_BODY_BYTES or budget <= 0:
            yield
            return
        size = min(size, budget)  # a body as large as the whole budget runs alone
        if self._bodies is None:
            self._bodies = _ByteBudget(budget)
        await self._bodies.acquire(size)
        try:
            yield
        finally:
            self._bodies.release(size)

    def running(self, workspace_id: str) -> int:
        bucket = self._buckets.get(workspace_id)
        return bucket.running if bucket else 0


class _ByteBudget:
    """Bytes handed out first come, first served; a request that cannot have its bytes within
    MANGO_WORKSPACE_REQUEST_WAIT_SECONDS is refused."""

    def __init__(self, total: int):
        self.free = total
        self.waiters: deque[tuple[int, asyncio.Future]] = deque()

    async def acquire(self, size: int) -> None:
        if not self.waiters and self.free >= size:
            self.free -= size
            return
        if len(self.waiters) >= settings.MANGO_WORKSPACE_MAX_WAITING_REQUESTS:
            raise _refused_body()
        turn = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self.waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(turn), settings.MANGO_WORKSPACE_REQUEST_WAIT_SECONDS)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if turn.done() and not turn.cancelled():  # granted as we gave up: give it back
                self.release(size)
            else:
                turn.cancel()
                self.waiters.remove(entry)
                self._grant()  # a large waiter leaving may unblock smaller ones behind it
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise _refused_body() from None

    def release(self, size: int) -> None:
        self.free += size
        self._grant()

    def _grant(self) -> None:
        while self.waiters and self.waiters[0][0] <= self.free:
            size, turn = self.waiters.popleft()
            if not turn.done():
                self.free -= size
                turn.set_result(None)


def _lookup(*, meta: dict) -> str:
    try:
        return api_key_authenticate_meta(meta).workspace_id
    except AuthenticationFailed:
        return ANONYMOUS
    except Exception:  # database trouble: Django answers with the envelope
        logger.warning("request shares could not read the key", exc_info=True)
        return ANONYMOUS


def _refused_body() -> "ShareRefused":
    return ShareRefused(
        "Too many large request bodies on this server process at once; retry shortly.",
        headers={"retry-after": str(RETRY_AFTER_SECONDS)},
    )


class ShareRefused(RateLimited):
    """No place for the request (raised by Shares.share before the request starts)."""


def _refused(limit: int) -> ShareRefused:
    return ShareRefused(
        f"Too many concurrent requests for this workspace (at most {limit} at once per server "
        "process, and a short queue); retry shortly.",
        headers={"retry-after": str(RETRY_AFTER_SECONDS)},
    )


# The running event loop's shares.
shares = PerLoop(Shares)
