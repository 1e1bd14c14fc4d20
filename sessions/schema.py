"""The OpenAPI description of the event stream, which is served outside DRF (sessions/streams.py,
on the event loop) and so is not seen by drf-spectacular's view inspection."""

STREAM_PATH = "/v1/sessions/{session_id}/events/stream"


def add_event_stream(result, generator, request, public):
    """POSTPROCESSING_HOOKS (before core.schema.add_error_responses)."""
    result.setdefault("paths", {})[STREAM_PATH] = {
        "get": {
            "operationId": "sessions_events_stream",
            "description": "The session's live events as server-sent events: `event: <type>` / "
            "`data: <json>` frames, `ping` heartbeats, `event_start`/`event_delta` previews with "
            "event_deltas[]=agent.message; the stream ends after session.deleted.",
            "tags": ["v1"],
            "parameters": [
                {"in": "path", "name": "session_id", "required": True, "schema": {"type": "string"}},
                {
                    "in": "query",
                    "name": "event_deltas[]",
                    "schema": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["agent.message", "agent.thinking"]},
                    },
                    "style": "form",
                    "explode": True,
                },
            ],
            "security": [{"ApiKeyAuth": []}, {"BearerAuth": []}],
            "responses": {
                "200": {
                    "description": "An unending text/event-stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                }
            },
        }
    }
    return result
