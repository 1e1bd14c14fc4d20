"""Per-workspace caps on concurrent work (uploads, event streams), shared by every API process.

A slot is a member of the Redis sorted set `mango:cap:{kind}:{workspace_id}` scored by its expiry
time. Taking one drops the expired members and adds one only below the cap, atomically (one Lua
script, on Redis's clock). Holders refresh their slots every LEASE_SECONDS / 3 and remove them
when done, so a client that disconnects frees its slot at once and a process that dies frees its
slots within LEASE_SECONDS: counts cannot leak.

The API's gate runs on the event loop (redis.asyncio), before a request gets a thread or a
database connection; the worker's (ThreadGate: running turns per workspace) is its blocking twin
for threads. When Redis is unreachable the caps fail open: the work goes ahead.
"""

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from django.conf import settings

from core.errors import RateLimited
from core.serving import PerLoop

logger = logging.getLogger(__name__)

LEASE_SECONDS = 60
# What a refused client is told to wait before retrying.
RETRY_AFTER_SECONDS = 5

_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]) + 5)
return 1
"""

_REFRESH = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
for i, member in ipairs(ARGV) do
  if i > 1 then redis.call('ZADD', KEYS[i - 1], 'XX', t + tonumber(ARGV[1]), member) end
end
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[1]) + 5) end
return 1
"""


def cap_key(kind: str, workspace_id: str) -> str:
    return f"mango:cap:{kind}:{workspace_id}"


@dataclass(frozen=True)
class Slot:
    key: str
    member: str


class _Gate:
    """What both gates share: the slot a take adds, the scripts, the refusal, the refresh of
    every held slot. `redis` is a blocking or an asyncio client (the subclass awaits or not)."""

    def __init__(self, client):
        self.redis = client
        self._take = client.register_script(_TAKE)
        self._refresh = client.register_script(_REFRESH)
        self._held: set[Slot] = set()
        # Slots whose release met an unreachable Redis: released before the next take, so that
        # after an outage a workspace is not refused for a minute by slots nobody holds.
        self._unreleased: set[Slot] = set()

    def _could_not_release(self, slot: Slot) -> None:
        logger.warning("could not release a cap slot; released once Redis answers")
        self._unreleased.add(slot)

    @staticmethod
    def _slot(kind: str, workspace_id: str) -> Slot:
        return Slot(key=cap_key(kind, workspace_id), member=uuid.uuid4().hex)

    @staticmethod
    def _take_call(slot: Slot, limit: int) -> dict:
        return {"keys": [slot.key], "args": [limit, LEASE_SECONDS, slot.member]}

    @staticmethod
    def _refresh_call(held: list[Slot]) -> dict:
        return {"keys": [s.key for s in held], "args": [LEASE_SECONDS, *(s.member for s in held)]}

    @staticmethod
    def _unavailable(kind: str) -> None:
        logger.warning("caps unavailable (Redis); admitting", extra={"cap": kind})

    @staticmethod
    def _refused(kind: str, limit: int) -> RateLimited:
        return RateLimited(
            f"Too many concurrent {kind} for this workspace (at most {limit}); retry later.",
            headers={"retry-after": str(RETRY_AFTER_SECONDS)},
        )


class CapsGate(_Gate):
    """The slots this process holds, on one event loop: taken, refreshed together, released."""

    def __init__(self, url: str):
        super().__init__(aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5))
        self._keeper: asyncio.Task | None = None

    async def take(self, *, kind: str, workspace_id: str, limit: int) -> Slot | None:
        """A slot, or RateLimited (429 with retry-after) when the workspace is at `limit`.
        None when Redis is unreachable (fail open: nothing to release)."""
        slot = self._slot(kind, workspace_id)
        try:
            for pending in list(self._unreleased):
                await self.redis.zrem(pending.key, pending.member)
                self._unreleased.discard(pending)
            taken = await self._take(**self._take_call(slot, limit))
        except (redis.RedisError, OSError):
            self._unavailable(kind)
            return None
        if not taken:
            raise self._refused(kind, limit)
        self._held.add(slot)
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        return slot

    async def release(self, slot: Slot | None) -> None:
        if slot is None:
            return
        self._held.discard(slot)
        try:
            await self.redis.zrem(slot.key, slot.member)
        except (redis.RedisError, OSError):
            self._could_not_release(slot)

    async def _keep(self) -> None:
        while self._held:
            await asyncio.sleep(LEASE_SECONDS / 3)
            held = list(self._held)
            if not held:
                return
            try:
                await self._refresh(**self._refresh_call(held))
            except (redis.RedisError, OSError):
                logger.warning("could not refresh cap slots")


class ThreadGate(_Gate):
    """The same slots for threads (the Celery worker): taken and released with a blocking client;
    one daemon thread per process refreshes every slot the process holds."""

    def __init__(self, url: str):
        super().__init__(redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5))
        self._lock = threading.Lock()
        self._keeper: threading.Thread | None = None

    def take(self, *, kind: str, workspace_id: str, limit: int) -> Slot | None:
        """A slot, or RateLimited when the workspace holds `limit`; None when Redis is
        unreachable (fail open: nothing to release)."""
        slot = self._slot(kind, workspace_id)
        try:
            with self._lock:
                unreleased = list(self._unreleased)
            for pending in unreleased:
                self.redis.zrem(pending.key, pending.member)
                with self._lock:
                    self._unreleased.discard(pending)
            taken = self._take(**self._take_call(slot, limit))
        except (redis.RedisError, OSError):
            self._unavailable(kind)
            return None
        if not taken:
            raise self._refused(kind, limit)
        with self._lock:
            self._held.add(slot)
            if self._keeper is None or not self._keeper.is_alive():
                self._keeper = threading.Thread(target=self._keep, daemon=True, name="mango-caps")
                self._keeper.start()
        return slot

    def release(self, slot: Slot | None) -> None:
        if slot is None:
            return
        with self._lock:
            self._held.discard(slot)
        try:
            self.redis.zrem(slot.key, slot.member)
        except (redis.RedisError, OSError):
            with self._lock:
                self._could_not_release(slot)

    def _keep(self) -> None:
        while True:
            threading.Event().wait(LEASE_SECONDS / 3)
            with self._lock:
                held = list(self._held)
                if not held:
                    self._keeper = None
                    return
            try:
                self._refresh(**self._refresh_call(held))
            except (redis.RedisError, OSError):
                logger.warning("could not refresh cap slots")


_thread_gates: dict[str, ThreadGate] = {}
_thread_gates_lock = threading.Lock()


def thread_gate() -> ThreadGate:
    """This process's gate for threads (one per Redis URL)."""
    with _thread_gates_lock:
        current = _thread_gates.get(settings.REDIS_URL)
        if current is None:
            current = _thread_gates[settings.REDIS_URL] = ThreadGate(settings.REDIS_URL)
        return current


# The gate of the running event loop; `gate.forget()` drops it (a private loop about to close).
gate = PerLoop(lambda: CapsGate(settings.REDIS_URL))
