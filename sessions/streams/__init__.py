"""`GET /v1/sessions/{id}/events/stream`: a session's live events as SSE, served on the event loop.

A stream holds no thread and no database connection while it waits. Per process (per event loop)
one Redis pub/sub connection carries the wake-ups and delta previews of every followed session,
and one feed per session takes each batch of new events once — from the wake-up itself, which
carries the committed events' frames, or else (a gap, a poll, a large batch) from one read of
the log, the reads of every feed that needs one going together as one query in a short call on
a small thread pool that gives its database connection back at once — and fans the encoded
frames out to every stream following that session. Wire format (api-contract.md "SSE framing"): a `: connected`
comment, then `event: <type>\\ndata: <json>\\n\\n` per event, `event: ping` heartbeats after
MANGO_SSE_HEARTBEAT_SECONDS of silence, `event_start` / `event_delta` previews with
`event_deltas[]=agent.message`, and the end after `session.deleted`.

- `framing.py`  the SSE bytes (encoded once per event, shared by every follower); the wake-up
- `hub.py`      this event loop's Redis subscription, one feed per session, `event_frames`
- `reads.py`    the feeds' reads of new events, batched: one query for every feed woken meanwhile
- `endpoint.py` the ASGI view (config/asgi.py routes the path to it): auth, the stream cap, the
                response; and the small ASGI helpers the upload gate shares
- `polls.py`    `GET /v1/environments/{id}/work/poll`, the self-hosted worker's long poll, the
                same way: no thread and no database connection while it waits
- `wsgi.py`     the same view for WSGI-only servers (the test live server, runserver): run on a
                private event loop in the request's thread
"""

from sessions.streams.endpoint import is_stream_request, meta_from_scope, send_error, stream_endpoint
from sessions.streams.polls import is_work_poll_request, work_poll_endpoint
from sessions.streams.wsgi import event_stream_view

__all__ = [
    "event_stream_view",
    "is_stream_request",
    "is_work_poll_request",
    "meta_from_scope",
    "send_error",
    "stream_endpoint",
    "work_poll_endpoint",
]
