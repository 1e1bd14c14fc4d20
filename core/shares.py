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


class _Gate:
    """`capacity` units handed out first come, first served: a request waits on the event loop
    for its amount (at most MANGO_WORKSPACE_MAX_WAITING_REQUESTS waiting, for at most
    MANGO_WORKSPACE_REQUEST_WAIT_SECONDS), else `refused()` is raised. A workspace's share is a
    gate of MANGO_WORKSPACE_MAX_REQUESTS places taken one at a time; the large-bodies budget is a
    gate of bytes."""

    def __init__(self, capacity: int):
        self.capacity = self.free = capacity
        self.waiters: deque[tuple[int, asyncio.Future]] = deque()

    @property
    def idle(self) -> bool:
        return self.free == self.capacity and not self.waiters

    async def acquire(self, amount: int, refused) -> None:
        if not self.waiters and self.free >= amount:
            self.free -= amount
            return
        if len(self.waiters) >= settings.MANGO_WORKSPACE_MAX_WAITING_REQUESTS:
            raise refused()
        turn = asyncio.get_running_loop().create_future()
        entry = (amount, turn)
        self.waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(turn), settings.MANGO_WORKSPACE_REQUEST_WAIT_SECONDS)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if turn.done() and not turn.cancelled():  # granted as we gave up: give it back
                self.release(amount)
            else:
                turn.cancel()
                self.waiters.remove(entry)
                self._grant()  # a large waiter leaving may unblock smaller ones behind it
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise refused() from None

    def release(self, amount: int) -> None:
        self.free += amount
        self._grant()

    def _grant(self) -> None:
        while self.waiters and self.waiters[0][0] <= self.free:
            amount, turn = self.waiters.popleft()
            if not turn.done():
                self.free -= amount
                turn.set_result(None)


class Shares:
    """The gates of one event loop (one API process): one per workspace with requests in flight,
    and the large-bodies budget."""

    def __init__(self):
        self._shares: dict[str, _Gate] = {}
        self._workspaces: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._bodies: _Gate | None = None

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
        gate = self._shares.setdefault(workspace_id, _Gate(limit))
        try:
            await gate.acquire(1, lambda: _refused(limit))
        except BaseException:  # refused, or the request was cancelled while waiting
            self._forget_if_idle(workspace_id, gate)
            raise
        try:
            yield
        finally:
            gate.release(1)
            self._forget_if_idle(workspace_id, gate)

    def _forget_if_idle(self, workspace_id: str, gate: _Gate) -> None:
        if gate.idle and self._shares.get(workspace_id) is gate:
            del self._shares[workspace_id]

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
            self._bodies = _Gate(budget)
        await self._bodies.acquire(size, _refused_body)
        try:
            yield
        finally:
            self._bodies.release(size)


# Workspaces of credentials other than API keys (the self-hosted worker's: sessions.queue.auth), installed
# by their app at start-up: each takes the request's META and answers a workspace id or None.
_resolvers: list = []


def workspace_resolver_install(resolve) -> None:
    if resolve not in _resolvers:
        _resolvers.append(resolve)


def _lookup(*, meta: dict) -> str:
    try:
        for resolve in _resolvers:
            found = resolve(meta)
            if found is not None:
                return found
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
