"""/v1/sessions/{id}/events: send and list; /events/stream: live events as server-sent events."""

import json
import logging
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.http import StreamingHttpResponse
from rest_framework.response import Response

from core.api import query_int, query_list, query_time_range
from core.errors import InvalidRequest
from sessions import notify
from sessions.apis.base import AgentsApi, query_order
from sessions.selectors import session_event_list, session_events_after, session_get
from sessions.serializers.events import event_to_wire, parse_events
from sessions.services.events import session_events_send

logger = logging.getLogger(__name__)


class SessionEventsApi(AgentsApi):
    def post(self, request, session_id: str):
        parsed = parse_events(request.data)
        rows = session_events_send(workspace=request.user, session_id=session_id, parsed=parsed)
        return Response({"data": [event_to_wire(row) for row in rows]})

    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        rows, next_page = session_event_list(
            session=session,
            limit=query_int(request, "limit", default=1000, minimum=1, maximum=1000),
            page=request.query_params.get("page"),
            order=query_order(request, "asc"),
            types=query_list(request, "types"),
            processed=query_time_range(request, "created_at"),
        )
        return Response({"data": [event_to_wire(row) for row in rows], "next_page": next_page})


# How often an SSE stream re-reads the log even without a Redis wake-up (lost publish, Redis down).
STREAM_POLL_SECONDS = 2.0


def _sse(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def event_stream(*, session_id: str, heartbeat_seconds: float, deltas: bool = False):
    """Live events of one session as SSE. Subscribes to the Redis wake-up channel before reading
    the current end of the log, so nothing appended in between is missed; also polls the database
    every STREAM_POLL_SECONDS. Holds no database connection while waiting. With `deltas`, also
    forwards the runner's ephemeral agent.message previews (event_start / event_delta) in the
    order they were published relative to the wake-ups. Ends after session.deleted."""
    from sessions.models import Session

    conn, pubsub = notify.subscribe(session_id, deltas=deltas)
    deltas_channel = notify.deltas_channel(session_id).encode()
    state = {"last_seq": 0, "last_sent": time.monotonic(), "done": False}

    def flush():
        """Frames for every event after the last one sent; marks the stream done after
        session.deleted or when the database is gone."""
        while True:
            try:
                batch = session_events_after(session_id=session_id, after_seq=state["last_seq"])
            except Exception:  # noqa: BLE001 — database gone (shutdown): end the stream
                logger.warning("event stream ended by a database error", extra={"session_id": session_id})
                state["done"] = True
                return
            for event in batch:
                state["last_seq"] = event.seq
                state["last_sent"] = time.monotonic()
                yield _sse(event.type, event_to_wire(event))
                if event.type == "session.deleted":
                    state["done"] = True
                    return
            if len(batch) < 500:
                break
        connection.close()

    try:
        state["last_seq"] = Session.objects.filter(id=session_id).values_list("last_seq", flat=True).first() or 0
        connection.close()
        yield b": connected\n\n"
        last_poll = time.monotonic()
        while not state["done"]:
            try:
                message = pubsub.get_message(timeout=min(1.0, heartbeat_seconds))
            except Exception:  # noqa: BLE001 — Redis trouble: the database poll still delivers
                message = None
                time.sleep(min(1.0, heartbeat_seconds))
            while message is not None and not state["done"]:
                if message.get("channel") == deltas_channel:
                    state["last_sent"] = time.monotonic()
                    data = message["data"]
                    preview = json.loads(data if isinstance(data, str) else data.decode())
                    yield _sse(preview["type"], preview)
                else:
                    last_poll = time.monotonic()
                    yield from flush()
                try:
                    message = pubsub.get_message(timeout=0)
                except Exception:  # noqa: BLE001
                    message = None
            if not state["done"] and time.monotonic() - last_poll >= STREAM_POLL_SECONDS:
                last_poll = time.monotonic()
                yield from flush()
            if not state["done"] and time.monotonic() - state["last_sent"] >= heartbeat_seconds:
                state["last_sent"] = time.monotonic()
                yield _sse("ping", {"type": "ping"})
    finally:
        try:
            pubsub.close()
            conn.close()
        finally:
            close_old_connections()


class SessionEventStreamApi(AgentsApi):
    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        event_deltas = query_list(request, "event_deltas")
        for kind in event_deltas:
            if kind not in ("agent.message", "agent.thinking"):
                raise InvalidRequest("event_deltas: only agent.message and agent.thinking.")
        response = StreamingHttpResponse(
            event_stream(
                session_id=session.id,
                heartbeat_seconds=settings.MANGO_SSE_HEARTBEAT_SECONDS,
                deltas="agent.message" in event_deltas,
            ),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
