"""What a process's live event streams cost the database (sessions/streams): every stream of a
session shares one feed; an append's wake-up carries the committed events' frames, so streams
that are up to date send them without reading the log at all; a feed that must read (a gap, a
batch too large for a wake-up) reads once for all its streams, and feeds that must read at the
same time share one query. Counted on every database connection of this process (the reads run
on core.serving's threads), against the real PostgreSQL and Redis."""

import asyncio
import json
import uuid

import pytest
import redis
from django.conf import settings
from django.db import transaction
from django.db.backends.signals import connection_created

from sessions import notify
from sessions.models import Session, SessionEvent
from sessions.runtime.upstream import PreviewPublisher
from sessions.services.events import session_event_append
from sessions.streams import framing, hub
from sessions.streams.hub import close_hub, event_frames
from sessions.streams.reads import BatchedReads
from tests.factories import make_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

STREAMS = 20


class Reads(list):
    starts = 0  # reads of where the log ends (a feed's start)


@pytest.fixture
def log_reads(monkeypatch):
    """The queries of this process that read the event log, on any connection. (Feeds poll the
    log after STREAM_POLL_SECONDS without a wake-up, a backstop for lost ones: not counted here.)"""
    monkeypatch.setattr(hub, "STREAM_POLL_SECONDS", 600)
    seen = Reads()

    def count(execute, sql, params, many, context):
        if "sessions_sessionevent" in sql and sql.lstrip().upper().startswith("SELECT"):
            seen.append(sql)
        elif sql.startswith(f'SELECT "{Session._meta.db_table}"."last_seq"'):  # where a stream starts
            seen.starts += 1
        return execute(sql, params, many, context)

    def install(sender, connection, **kwargs):
        if count not in connection.execute_wrappers:
            connection.execute_wrappers.append(count)

    connection_created.connect(install)
    yield seen
    connection_created.disconnect(install)


class Streams:
    """`count` streams of each session, read on this loop (as the ASGI endpoint reads them)."""

    def __init__(self, session_ids: list[str], count: int):
        self.received = {(s, i): [] for s in session_ids for i in range(count)}
        self.ended: set = set()
        self.connected = asyncio.Semaphore(0)
        self.tasks = [asyncio.ensure_future(self._read(*key)) for key in self.received]

    async def _read(self, session_id: str, index: int) -> None:
        frames = event_frames(session_id=session_id, deltas=frozenset(), heartbeat_seconds=60)
        async for chunk in frames:
            if chunk == framing.CONNECTED:
                self.connected.release()
                continue
            for frame in chunk.split(b"\n\n")[:-1]:
                data = json.loads(frame.split(b"\ndata: ", 1)[1])
                self.received[(session_id, index)].append((data["type"], data["id"]))
        self.ended.add((session_id, index))

    async def opened(self) -> None:
        """Every stream sent `: connected`, and Redis has the feeds' subscriptions (SUBSCRIBE is
        not confirmed before it returns: a publish just after could still miss it)."""
        for _ in self.tasks:
            await asyncio.wait_for(self.connected.acquire(), 10)
        client = redis.Redis.from_url(settings.REDIS_URL)
        channels = [notify.events_channel(session_id) for session_id, _ in self.received]
        await self.until(lambda: all(count for _, count in client.pubsub_numsub(*channels)))

    async def until(self, ready) -> None:
        for _ in range(500):
            if ready():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"streams did not get there: {self.received}")

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await close_hub()


def _append(session_id: str, text: str) -> SessionEvent:
    payload = {"content": [{"type": "text", "text": text}]}
    return session_event_append(session_id=session_id, type="agent.message", payload=payload)


def _append_unannounced(session_id: str) -> None:
    """An event committed without its wake-up (as when that publish is still on its way, or lost)."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(id=session_id)
        session.last_seq += 1
        SessionEvent.objects.create(
            session=session, seq=session.last_seq, type="agent.thinking", payload={}, created_at=session.created_at
        )
        session.save(update_fields=["last_seq"])


def test_streams_of_a_session_send_each_wakeup_s_frames_without_reading_the_log(api_key, log_reads):
    session = make_session(api_key.workspace)

    async def scenario():
        streams = Streams([session.id], STREAMS)
        try:
            await streams.opened()
            assert log_reads.starts == 1  # the feed's; the 20 streams start where it stands
            before = len(log_reads)
            appended = [await asyncio.to_thread(_append, session.id, f"step {i}") for i in range(5)]
            expected = [("agent.message", event.id) for event in appended]
            await streams.until(lambda: all(len(got) == 5 for got in streams.received.values()))
            return before, expected, streams.received
        finally:
            await streams.close()

    before, expected, received = asyncio.run(scenario())
    assert all(got == expected for got in received.values())
    # 5 events to 20 streams: the frames came with the wake-ups; the log was not read once.
    assert log_reads[before:] == []


def test_a_gap_is_read_once_for_all_streams_and_sessions_reading_together_share_a_query(api_key, log_reads):
    first, second = make_session(api_key.workspace, name="a"), make_session(api_key.workspace, name="b")

    async def scenario():
        streams = Streams([first.id, second.id], STREAMS // 2)
        try:
            await streams.opened()
            # Both sessions get an event whose wake-up never comes, then one whose wake-up does:
            # each feed sees the gap and reads; both reads go out as one query.
            for session in (first, second):
                await asyncio.to_thread(_append_unannounced, session.id)
            before = len(log_reads)
            loop = asyncio.get_running_loop()
            with_wakeups = await asyncio.gather(
                *(loop.run_in_executor(None, _append, s.id, "after the gap") for s in (first, second))
            )
            await streams.until(lambda: all(len(got) == 2 for got in streams.received.values()))
            return before, with_wakeups, streams.received
        finally:
            await streams.close()

    before, with_wakeups, received = asyncio.run(scenario())
    for session, event in zip((first, second), with_wakeups, strict=True):
        for (session_id, _), got in received.items():
            if session_id == session.id:
                assert [t for t, _ in got] == ["agent.thinking", "agent.message"]
                assert got[1][1] == event.id
    # One read per feed at most, whatever the number of streams: 1 or 2 queries, never 20.
    assert 1 <= len(log_reads[before:]) <= 2, log_reads[before:]


def test_a_large_batch_is_read_from_the_log_and_session_deleted_ends_the_streams(api_key, log_reads):
    session = make_session(api_key.workspace)
    large = "x" * (framing.MAX_WAKEUP_FRAMES_BYTES + 1)

    async def scenario():
        streams = Streams([session.id], STREAMS)
        try:
            await streams.opened()
            before = len(log_reads)
            big = await asyncio.to_thread(_append, session.id, large)
            await streams.until(lambda: all(len(got) == 1 for got in streams.received.values()))
            reads = len(log_reads) - before
            await asyncio.to_thread(session_event_append, session_id=session.id, type="session.deleted")
            await streams.until(lambda: len(streams.ended) == STREAMS)
            return reads, big, streams.received
        finally:
            await streams.close()

    reads, big, received = asyncio.run(scenario())
    assert reads == 1  # the wake-up carried only the seq: one read served all 20 streams
    assert all([t for t, _ in got] == ["agent.message", "session.deleted"] for got in received.values())
    assert all(got[0][1] == big.id for got in received.values())


def test_wakeup_round_trip():
    class Event:
        def __init__(self, seq, type):
            self.seq, self.id, self.type, self.payload = seq, f"sevt_{seq}", type, {"n": seq}
            self.processed_at = self.created_at = None

    events = [Event(7, "agent.message"), Event(8, "session.status_idle")]
    last, frames = framing.parse_wakeup(framing.wakeup(events))
    assert last == 8
    assert frames == [(7, framing.event_frame(events[0])), (8, framing.event_frame(events[1]))]
    assert framing.parse_wakeup(b"12") == (12, [])
    with pytest.raises(ValueError):
        framing.parse_wakeup(b"3 10,5\nshort")


def test_reads_requested_together_go_out_as_one_query(api_key, log_reads):
    sessions = [make_session(api_key.workspace, name=str(i)) for i in range(3)]
    for session in sessions:
        _append(session.id, "one")
        _append(session.id, "two")

    async def scenario():
        reads = BatchedReads()
        return await asyncio.gather(*(reads.after(s.id, session_id=s.id, after_seq=1) for s in sessions))

    before = len(log_reads)
    found = asyncio.run(scenario())
    assert len(log_reads) - before == 1
    for session, frames in zip(sessions, found, strict=True):
        expected = SessionEvent.objects.get(session=session, seq=2)
        assert frames == [(2, framing.event_frame(expected))]


def test_previews_are_subscribed_to_only_once_a_stream_asks_for_them(api_key):
    """Most streams take no event_deltas: their feed does not receive the session's previews at
    all. A stream that asks for them on a feed already running adds the subscription."""
    session = make_session(api_key.workspace)
    client = redis.Redis.from_url(settings.REDIS_URL)
    deltas_channel = notify.deltas_channel(session.id)

    def subscribers(channel: str) -> int:
        return dict(client.pubsub_numsub(channel))[channel.encode()]

    async def first_frame(frames) -> bytes:
        while (chunk := await anext(frames)) == framing.CONNECTED:
            pass
        return chunk

    async def scenario():
        plain = event_frames(session_id=session.id, deltas=frozenset(), heartbeat_seconds=60)
        previews = event_frames(session_id=session.id, deltas=frozenset({"agent.message"}), heartbeat_seconds=60)
        try:
            assert await anext(plain) == framing.CONNECTED
            before = subscribers(deltas_channel)
            assert await anext(previews) == framing.CONNECTED
            for _ in range(500):
                if subscribers(deltas_channel):
                    break
                await asyncio.sleep(0.01)
            preview = {"type": "event_start", "event": {"type": "agent.message", "id": "sevt_x"}}
            await asyncio.to_thread(notify.publish_delta, session.id, preview)
            got_preview = await asyncio.wait_for(first_frame(previews), 5)
            await asyncio.to_thread(_append, session.id, "after the preview")
            return before, got_preview, await asyncio.wait_for(first_frame(plain), 5)
        finally:
            await plain.aclose()
            await previews.aclose()
            await close_hub()

    before, got_preview, plain_first = asyncio.run(scenario())
    assert before == 0
    assert got_preview.startswith(b"event: event_start\n")
    assert plain_first.startswith(b"event: agent.message\n")  # the plain stream never saw the preview


def test_a_message_nobody_listens_to_publishes_no_deltas(settings):
    """The turn's previews (runtime.upstream.PreviewPublisher): a message whose event_start
    reached no stream publishes none of its text deltas (a model streams one per few tokens), so a
    stream that subscribes mid-message gets nothing of it; a message whose start was heard gets
    its start and every delta. Against the real Redis."""
    session_id = f"sesn_previews_{uuid.uuid4().hex}"
    listener = redis.Redis.from_url(settings.REDIS_URL).pubsub()

    def message(publisher: PreviewPublisher, words: list[str]) -> None:
        publisher.handle({"type": "block_start", "index": 0, "block_type": "text"})
        for word in words:
            publisher.handle({"type": "text_delta", "index": 0, "text": word})

    def received() -> list[dict]:
        out = []
        while (got := listener.get_message(timeout=0.5)) is not None:
            if got["type"] == "message":
                out.append(json.loads(got["data"]))
        return out

    try:
        quiet = PreviewPublisher(session_id)
        quiet.handle({"type": "block_start", "index": 0, "block_type": "text"})
        listener.subscribe(notify.deltas_channel(session_id))
        assert listener.get_message(timeout=5)["type"] == "subscribe"  # subscribed before the deltas
        for word in ("never ", "sent"):
            quiet.handle({"type": "text_delta", "index": 0, "text": word})
        assert received() == []
        assert len(quiet.message_ids) == 1  # the message's id is allocated all the same

        heard = PreviewPublisher(session_id)
        message(heard, ["Hello ", "there ", "world"])
        got = received()
        assert [m["type"] for m in got] == ["event_start", "event_delta", "event_delta", "event_delta"]
        assert got[0]["event"]["id"] == heard.message_ids[0]
        assert "".join(m["delta"]["content"]["text"] for m in got[1:]) == "Hello there world"
    finally:
        listener.close()
