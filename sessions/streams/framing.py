"""SSE framing (api-contract.md "SSE framing"). A frame is encoded once per event and the same
bytes go to every stream that follows the session."""

import json

CONNECTED = b": connected\n\n"


def sse(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


PING = sse("ping", {"type": "ping"})


def delta_frame(data) -> bytes | None:
    """The frame of an event_start / event_delta preview as published on Redis (None when it is
    not one)."""
    try:
        preview = json.loads(data if isinstance(data, str) else data.decode())
        return sse(preview["type"], preview)
    except (ValueError, KeyError, TypeError):
        return None
