"""SSE framing (api-contract.md "SSE framing"). A frame is encoded once per event and the same
bytes go to every stream that follows the session.

Also the "new events" wake-up published on Redis after an append commits (sessions.notify):
`<first seq> <frame sizes>\n<frames>` — the committed events' frames, encoded once by the
appender, so a stream's feed that is up to date sends them without reading the log — or just
`<last seq>` when they are large (the feed reads them from the log, as after a gap)."""

import json

from sessions.serializers.events import event_to_wire

CONNECTED = b": connected\n\n"


def sse(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


PING = sse("ping", {"type": "ping"})
# How the frame of session.deleted (the end of every stream of the session) begins.
DELETED_PREFIX = b"event: session.deleted\n"


def delta_frame(data) -> bytes | None:
    """The frame of an event_start / event_delta preview as published on Redis (None when it is
    not one)."""
    try:
        preview = json.loads(data if isinstance(data, str) else data.decode())
        return sse(preview["type"], preview)
    except (ValueError, KeyError, TypeError):
        return None


def event_frame(event) -> bytes:
    """The frame of a stored event (a SessionEvent or anything with its fields)."""
    return sse(event.type, event_to_wire(event))


# Frames carried in one wake-up at most; larger batches are read from the log.
MAX_WAKEUP_FRAMES_BYTES = 32 * 1024


def wakeup(events, *, payload_bytes: int = 0) -> bytes:
    """The wake-up for `events`, just appended (contiguous seqs, oldest first). `payload_bytes`:
    the JSON size of their payloads, when the appender knows it — over the cap, their frames
    are not even rendered."""
    if payload_bytes > MAX_WAKEUP_FRAMES_BYTES:
        return str(events[-1].seq).encode()
    try:
        frames = [event_frame(event) for event in events]
    except (TypeError, ValueError, AttributeError):  # not renderable from memory: read from the log
        frames = None
    if frames is None or sum(len(frame) for frame in frames) > MAX_WAKEUP_FRAMES_BYTES:
        return str(events[-1].seq).encode()
    sizes = ",".join(str(len(frame)) for frame in frames)
    return f"{events[0].seq} {sizes}\n".encode() + b"".join(frames)


def parse_wakeup(data: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    """(last seq, [(seq, frame), ...]) of a wake-up; no frames when it carries none. Raises
    ValueError on a malformed one."""
    head, newline, body = data.partition(b"\n")
    if not newline:
        return int(head), []
    first, sizes = head.split(b" ")
    seq, offset, frames = int(first), 0, []
    for size in map(int, sizes.split(b",")):
        frames.append((seq, body[offset : offset + size]))
        seq, offset = seq + 1, offset + size
    if offset != len(body):
        raise ValueError("wake-up frames do not add up")
    return seq - 1, frames
