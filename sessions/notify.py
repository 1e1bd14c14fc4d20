"""Redis signals between the API and the workers: "new events" wake-ups for SSE streams and the
interrupt flag a running turn polls. Both are hints; PostgreSQL stays the source of truth (streams
also poll the database, the runner confirms interrupts against the event log)."""

import json
import logging

import redis

from core.redis_client import redis_client

logger = logging.getLogger(__name__)


def client() -> redis.Redis:
    """The process's Redis client for REDIS_URL (core.redis_client; publishes wait up to 5 s)."""
    return redis_client(socket_timeout=5)


def events_channel(session_id: str) -> str:
    return f"mango:session-events:{session_id}"


def deltas_channel(session_id: str) -> str:
    return f"mango:session-deltas:{session_id}"


def interrupt_key(session_id: str) -> str:
    return f"mango:session-interrupt:{session_id}"


def input_key(session_id: str) -> str:
    return f"mango:session-input:{session_id}"


def _last_seq_only(events, *, payload_bytes: int = 0) -> bytes:
    return str(events[-1].seq).encode()


# How a wake-up is rendered: installed by the streams layer at start-up (sessions/apps.py:
# sessions.streams.framing.wakeup, the committed events' frames); without it a wake-up names the
# last seq and the streams read the log. Services never render frames themselves.
_render_wakeup = _last_seq_only


def wakeup_renderer_install(render) -> None:
    global _render_wakeup
    _render_wakeup = render


def events_committed(session_id: str, events: list, *, payload_bytes: int = 0) -> None:
    """After a commit: wake the session's streams with the events just committed (contiguous
    seqs, oldest first). `payload_bytes`, when known, lets the renderer skip large batches."""
    publish_events(session_id, _render_wakeup(events, payload_bytes=payload_bytes))


def publish_events(session_id: str, wakeup: bytes) -> None:
    """Publish a rendered wake-up on the session's events channel (a hint; never raises)."""
    try:
        client().publish(events_channel(session_id), wakeup)
    except redis.RedisError:
        logger.warning("could not publish session events", extra={"session_id": session_id})


def publish_delta(session_id: str, payload: dict) -> int:
    """An ephemeral preview (event_start / event_delta) for streams that opted into deltas.
    Returns how many of the API's processes took it (0 when Redis did not answer)."""
    try:
        return client().publish(deltas_channel(session_id), json.dumps(payload, separators=(",", ":")))
    except redis.RedisError:
        logger.debug("could not publish a delta", extra={"session_id": session_id})
        return 0


def _flag_set(key: str, seconds: int, *, what: str, session_id: str) -> None:
    try:
        client().set(key, "1", ex=seconds)
    except redis.RedisError:
        logger.warning(f"could not flag {what}", extra={"session_id": session_id})


def _flag_clear(key: str) -> None:
    try:
        client().delete(key)
    except redis.RedisError:
        pass


def set_interrupt(session_id: str) -> None:
    _flag_set(interrupt_key(session_id), 3600, what="interrupt", session_id=session_id)


def clear_interrupt(session_id: str) -> None:
    _flag_clear(interrupt_key(session_id))


def interrupt_flagged(session_id: str) -> bool:
    try:
        return bool(client().exists(interrupt_key(session_id)))
    except redis.RedisError:
        return False


# How long an input flag outlives its runner's wait (it is only a wake-up: the runner reads the
# pending input from the log under the session's lock).
INPUT_FLAG_SECONDS = 300


def set_input(session_id: str) -> None:
    """Input for a session whose runner holds its lease: wakes the runner if it waits for the
    client (a hint; never raises: the runner reads the log before it lets the session go)."""
    _flag_set(input_key(session_id), INPUT_FLAG_SECONDS, what="input", session_id=session_id)


def clear_input(session_id: str) -> None:
    _flag_clear(input_key(session_id))


def flags(keys: list[str]) -> list[bool]:
    """Which of these flag keys are set, in one round trip (a worker's watcher reads the
    interrupt and input flags of all its turns together)."""
    return [value is not None for value in client().mget(keys)]
