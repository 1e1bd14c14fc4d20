"""The event loop's reads of the session event log, batched: every feed that must read (a poll, a
gap, a wake-up too large to carry its frames) while a read runs is served by the next one, in one
query for all of them (sessions.selectors.session_events_after_many), each frame encoded once."""

import asyncio

from core.serving import db_call
from sessions.selectors import session_events_after_many
from sessions.streams.framing import event_frame

# Events read for one session at a time (a feed that gets this many reads again at once).
EVENT_BATCH = 500
# Sessions one query reads for at most (the rest wait for the next one).
MAX_SESSIONS_PER_READ = 200

Frames = list[tuple[int, bytes]]  # (seq, SSE frame) per event, oldest first


def frames_after_many(*, wants: list[tuple[str, int]]) -> list[Frames]:
    """The frames of the events after each (session id, seq) of `wants` (a database read)."""
    return [
        [(event.seq, event_frame(event)) for event in events]
        for events in session_events_after_many(wants=wants, limit=EVENT_BATCH)
    ]


class BatchedReads:
    """One read at a time per event loop; `after()` waits for the one that includes it."""

    def __init__(self):
        self._wanted: dict[object, tuple[str, int, asyncio.Future]] = {}
        self._task: asyncio.Task | None = None

    async def after(self, key: object, *, session_id: str, after_seq: int) -> Frames:
        """The frames of `session_id`'s events after `after_seq`, for one reader `key` (a feed:
        one read in flight per key)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._wanted[key] = (session_id, after_seq, future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        try:
            return await future
        finally:
            if self._wanted.get(key, (None, None, None))[2] is future:  # cancelled before its read
                del self._wanted[key]

    async def _run(self) -> None:
        while self._wanted:
            keys = list(self._wanted)[:MAX_SESSIONS_PER_READ]
            batch = [self._wanted.pop(key) for key in keys]
            try:
                found = await db_call(frames_after_many, wants=[(s, after) for s, after, _ in batch])
            except asyncio.CancelledError:
                for _, _, future in batch + list(self._wanted.values()):
                    future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 — each reader gets the error
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, _, future), frames in zip(batch, found, strict=True):
                if not future.done():
                    future.set_result(frames)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
