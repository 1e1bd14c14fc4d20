"""This event loop's share of the live event streams: one Redis pub/sub connection for every
followed session, one feed per session that takes each batch of new events once — the frames a
wake-up carries (framing.wakeup), or else one read of the log (reads.BatchedReads) — and fans the
encoded frames out to its followers, and `event_frames`, the bytes of one stream.

A feed lives exactly as long as it has followers: the last one to leave cancels it (no more reads,
its channels unsubscribed), and a feed that ends (session.deleted, an error) ends its streams."""

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import redis
import redis.asyncio as aioredis
from django.conf import settings

from core import metrics
from core.serving import PerLoop, db_call
from sessions import notify
from sessions.models import Session
from sessions.streams import framing
from sessions.streams.framing import CONNECTED, PING, delta_frame
from sessions.streams.reads import EVENT_BATCH, BatchedReads

logger = logging.getLogger(__name__)

# How long a feed goes without a Redis wake-up before it reads the log anyway: a backstop for a
# publish that failed (the subscriber's own lost connection makes every feed read at once).
STREAM_POLL_SECONDS = 5.0
# Frames a stream may fall behind (a client that stopped reading) before it is ended.
MAX_QUEUED_FRAMES = 5000

_END = None


# --- database reads (through core.serving.db_call; new events through BatchedReads) -------------


def _last_seq(*, session_id: str) -> int:
    return Session.objects.filter(id=session_id).values_list("last_seq", flat=True).first() or 0


# --- fan-out -----------------------------------------------------------------------------------


class Follower:
    """One open stream: frames queued for it, and where it starts (events up to `after_seq`
    existed before it opened and are not sent)."""

    def __init__(self, *, deltas: frozenset[str] = frozenset()):
        self.deltas = deltas  # the event types whose previews it asked for (event_deltas[])
        self.previewing: set[str] = set()  # ids of the previews it was sent the start of
        self.after_seq = 0
        self.queue: asyncio.Queue = asyncio.Queue()

    def offer(self, item) -> None:
        if self.queue.qsize() >= MAX_QUEUED_FRAMES:
            # The client stopped reading: end its stream rather than buffer without bound.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(_END)
            return
        self.queue.put_nowait(item)


class Feed:
    """One session's events for every stream following it in this process. Its task subscribes
    to the session's channels, then reads where the log ends (`ready`), then reads the log when
    it must (a wake-up without frames or after a gap, a poll); a follower reads its own start only
    after `ready`, so it misses nothing. A wake-up or preview that finds the feed ready and idle
    is served where it arrives (`deliver`), without a hop through the feed's task."""

    def __init__(self, hub: "Hub", session_id: str):
        self.hub = hub
        self.session_id = session_id
        self.followers: set[Follower] = set()
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.ready = asyncio.Event()
        self.last_seq = 0  # the last event fanned out
        self.start_seq = 0  # where the log ended once the feed had subscribed (`ready`)
        self.ended = False
        self.busy = True  # starting or reading: messages queue in the inbox, in order
        # Previews (the deltas channel) are subscribed to only once a follower asks for them.
        self.deltas = False
        self.subscribed = False  # its subscription was sent (a later deltas follower adds one)
        self.heard = 0.0  # loop time of the last wake-up served or read (polls count from it)
        self.task = asyncio.get_running_loop().create_task(self._run())

    def deliver(self, kind: str, data) -> None:
        """A message from the session's channels (Hub._read)."""
        if not self.busy and self.inbox.empty() and not self.ended:
            if kind == "delta":
                self._fan_out_delta(data)
                return
            if self._take_wakeup(data):
                self.heard = asyncio.get_running_loop().time()
                return
        self.inbox.put_nowait((kind, data))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.subscribed = True
            await self.hub.subscribe(self.session_id, deltas=self.deltas)
            self.start_seq = self.last_seq = await db_call(_last_seq, session_id=self.session_id)
            self.ready.set()
            self.heard = loop.time()
            while not self.ended:
                self.busy = False
                try:
                    # asyncio.timeout, not wait_for: no task per wait (Python 3.11).
                    async with asyncio.timeout(max(0.0, self.heard + STREAM_POLL_SECONDS - loop.time())):
                        kind, data = await self.inbox.get()
                except TimeoutError:
                    if loop.time() - self.heard < STREAM_POLL_SECONDS:
                        continue  # a wake-up was served meanwhile (deliver)
                    kind, data = "events", None
                self.busy = True
                if kind == "delta":
                    self._fan_out_delta(data)
                    continue
                self.heard = loop.time()
                if not self._take_wakeup(data):
                    await self._read()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("event feed ended by an error", extra={"session_id": self.session_id}, exc_info=True)
            self.end()

    def _fan_out_delta(self, data) -> None:
        """A preview to the followers that asked for its event type: an event_start by its
        event's type, an event_delta to those that were sent its start."""
        wanting = [follower for follower in self.followers if follower.deltas]
        frame = delta_frame(data) if wanting else None
        if not frame:
            return
        preview = json.loads(data if isinstance(data, str) else data.decode())
        started = preview.get("event") or {}
        for follower in wanting:
            if preview.get("type") == "event_start":
                if started.get("type") not in follower.deltas:
                    continue
                follower.previewing.add(started.get("id"))
            elif preview.get("event_id") not in follower.previewing:
                continue
            follower.offer((None, frame))

    def _take_wakeup(self, data) -> bool:
        """Serve a wake-up from the frames it carries: True when this feed is up to date after it
        (they follow on from what it sent, or it has them already), False when it must read the
        log (a poll, a wake-up without frames, a gap: another append's wake-up still on its way)."""
        if data is None:
            return False
        try:
            last_seq, frames = framing.parse_wakeup(data)
        except ValueError:
            return False
        if last_seq <= self.last_seq:
            return True
        if not frames or frames[0][0] > self.last_seq + 1:
            return False
        for seq, frame in frames:
            if seq > self.last_seq and not self._fan_out(seq, frame):
                break
        return True

    def _fan_out(self, seq: int, frame: bytes) -> bool:
        """Send one event's frame to every follower; False once the feed ended (session.deleted)."""
        self.last_seq = seq
        for follower in list(self.followers):
            follower.offer((seq, frame))
        if frame.startswith(framing.DELETED_PREFIX):
            self.end()
            return False
        return True

    async def _read(self) -> None:
        while True:
            try:
                batch = await self.hub.reads.after(self, session_id=self.session_id, after_seq=self.last_seq)
            except Exception:
                logger.warning("event feed read failed", extra={"session_id": self.session_id}, exc_info=True)
                return
            for seq, frame in batch:
                if not self._fan_out(seq, frame):
                    return
            if len(batch) < EVENT_BATCH:
                return

    def end(self) -> None:
        """End every stream of this feed (their clients see the end of the response)."""
        self.ended = True
        self.ready.set()
        for follower in list(self.followers):
            follower.offer(_END)
        self.hub.drop(self)


class Hub:
    """This event loop's Redis subscription and feeds."""

    def __init__(self):
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=None)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.feeds: dict[str, Feed] = {}
        self.reads = BatchedReads()
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task | None = None
        self.events_prefix = notify.events_channel("")
        self.deltas_prefix = notify.deltas_channel("")
        self.draining = False

    def end_all(self) -> None:
        """This process stops serving (a worker recycled or shut down): end every stream now, as
        complete responses, so clients reconnect (to another worker) and resume from the events
        list instead of being cut off when the worker's graceful timeout runs out."""
        self.draining = True
        for feed in list(self.feeds.values()):
            feed.end()

    def follow(self, session_id: str, follower: Follower) -> Feed:
        feed = self.feeds.get(session_id)
        if feed is None:
            feed = self.feeds[session_id] = Feed(self, session_id)
        feed.followers.add(follower)
        if follower.deltas and not feed.deltas:
            feed.deltas = True
            if feed.subscribed:  # else the feed's task subscribes to both channels
                asyncio.get_running_loop().create_task(self.subscribe(session_id, deltas=True, events=False))
        return feed

    def unfollow(self, feed: Feed, follower: Follower) -> None:
        """The last follower to leave stops the feed: no more reads, its channels unsubscribed."""
        feed.followers.discard(follower)
        if not feed.followers:
            feed.task.cancel()
            self.drop(feed)

    def drop(self, feed: Feed) -> None:
        if self.feeds.get(feed.session_id) is feed:
            del self.feeds[feed.session_id]
            asyncio.get_running_loop().create_task(self._unsubscribe(feed.session_id))

    async def subscribe(self, session_id: str, *, deltas: bool, events: bool = True) -> None:
        channels = [notify.events_channel(session_id)] if events else []
        channels += [notify.deltas_channel(session_id)] if deltas else []
        async with self.lock:
            try:
                await self.pubsub.subscribe(*channels)
            except (redis.RedisError, OSError):
                logger.warning("SSE wake-ups unavailable (Redis); polling", extra={"session_id": session_id})
                return
            if self.reader is None or self.reader.done():
                self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _unsubscribe(self, session_id: str) -> None:
        async with self.lock:
            if session_id in self.feeds:  # followed again meanwhile
                return
            with contextlib.suppress(redis.RedisError, OSError):
                await self.pubsub.unsubscribe(notify.events_channel(session_id), notify.deltas_channel(session_id))

    async def _read(self) -> None:
        while True:
            try:
                # Blocking (timeout=None): no timer per message.
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 — Redis trouble: reconnect later, then every feed reads
                await asyncio.sleep(1.0)
                for feed in list(self.feeds.values()):
                    feed.inbox.put_nowait(("events", None))  # what was published meanwhile is lost
                continue
            if message is None:
                continue
            channel = message["channel"]
            channel = channel.decode() if isinstance(channel, bytes) else channel
            if channel.startswith(self.deltas_prefix):
                feed, kind = self.feeds.get(channel[len(self.deltas_prefix) :]), "delta"
            else:
                feed, kind = self.feeds.get(channel[len(self.events_prefix) :]), "events"
            if feed is not None:
                feed.deliver(kind, message["data"])

    async def aclose(self) -> None:
        for feed in list(self.feeds.values()):
            feed.task.cancel()
        self.reads.cancel()
        if self.reader is not None:
            self.reader.cancel()
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()
        with contextlib.suppress(Exception):
            await self.redis.aclose()


# The running event loop's hub.
hub = PerLoop(Hub)


def draining() -> bool:
    """Whether the running loop's process is shutting down (no new streams)."""
    current = hub.peek()
    return current is not None and current.draining


def end_streams() -> None:
    """End every stream of the running loop (see Hub.end_all)."""
    hub().end_all()


async def close_hub() -> None:
    """Close the running loop's hub (a private loop that is about to close)."""
    current = hub.forget()
    if current is not None:
        await current.aclose()


def _take_ready(follower: Follower, first) -> tuple[bytes, bool]:
    """`first` and every frame already queued behind it, as one chunk (one write to the client
    however many events a batch brought); and whether the stream ends after it."""
    frames, item = [], first
    while True:
        if item is _END:
            return b"".join(frames), True
        seq, frame = item
        if seq is None or seq > follower.after_seq:
            frames.append(frame)
        if follower.queue.empty():
            return b"".join(frames), False
        item = follower.queue.get_nowait()


async def event_frames(*, session_id: str, deltas: frozenset[str], heartbeat_seconds: float) -> AsyncIterator[bytes]:
    """The SSE bytes of one stream: it starts where its feed stood when it joined (a starting
    feed: where the log ended once it had subscribed), so nothing appended after it opened is
    missed; ends after session.deleted and when this process stops serving (`Hub.end_all`)."""
    current = hub()
    follower = Follower(deltas=deltas)
    feed = current.follow(session_id, follower)
    # A running feed fans out to this stream exactly what comes after the last event it sent; a
    # starting one everything after where the log ended once it had subscribed. Either way: the
    # events appended after this stream opened, without a read of its own.
    joined_at = feed.last_seq if feed.ready.is_set() else None
    metrics.EVENT_STREAMS_OPEN.inc()
    try:
        await feed.ready.wait()
        follower.after_seq = feed.start_seq if joined_at is None else joined_at
        yield CONNECTED
        loop = asyncio.get_running_loop()
        last_sent = loop.time()
        while True:
            wait = last_sent + heartbeat_seconds - loop.time()
            if wait <= 0:
                last_sent = loop.time()
                yield PING
                continue
            try:
                # asyncio.timeout, not wait_for: no task per wait (Python 3.11).
                async with asyncio.timeout(wait):
                    item = await follower.queue.get()
            except TimeoutError:
                continue
            chunk, ended = _take_ready(follower, item)
            if chunk:
                last_sent = loop.time()
                yield chunk
            if ended:
                return
    finally:
        metrics.EVENT_STREAMS_OPEN.dec()
        current.unfollow(feed, follower)
