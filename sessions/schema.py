"""The OpenAPI description of the event stream, which is served outside DRF (sessions/streams.py,
on the event loop) and so is not seen by drf-spectacular's view inspection."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension

STREAM_PATH = "/v1/sessions/{session_id}/events/stream"
THREAD_STREAM_PATH = "/v1/sessions/{session_id}/threads/{thread_id}/stream"
WORK_POLL_PATH = "/v1/environments/{environment_id}/work/poll"


def add_event_stream(result, generator, request, public):
    """POSTPROCESSING_HOOKS (before core.schema.add_error_responses)."""
    paths = result.setdefault("paths", {})
    paths[STREAM_PATH] = _stream_operation("sessions_events_stream", ("session_id",))
    paths[THREAD_STREAM_PATH] = _stream_operation("sessions_threads_stream", ("session_id", "thread_id"))
    # A poll without work answers JSON null (served on the event loop: sessions/streams/polls.py).
    poll = paths.get(WORK_POLL_PATH, {}).get("get")
    if poll is not None:
        content = poll["responses"]["200"]["content"]["application/json"]
        content["schema"] = {"oneOf": [content["schema"], {"type": "null"}]}
    return result


def _stream_operation(operation_id: str, path_names: tuple[str, ...]) -> dict:
    return {
        "get": {
            "operationId": operation_id,
            "description": "The session's live events as server-sent events: `event: <type>` / "
            "`data: <json>` frames, `ping` heartbeats, `event_start`/`event_delta` previews with "
            "event_deltas[]=agent.message; the stream ends after session.deleted.",
            "tags": ["v1"],
            "parameters": [
                *({"in": "path", "name": name, "required": True, "schema": {"type": "string"}} for name in path_names),
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


class WorkerCredentialScheme(OpenApiAuthenticationExtension):
    """sessions.queue.auth.WorkerCredentialAuthentication: an environment key or a work item's token, sent
    as a bearer token (documented on the routes that take them: sessions/queue/apis.py)."""

    target_class = "sessions.queue.auth.WorkerCredentialAuthentication"
    name = "BearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "The API key as a bearer token (SDK 2.x)."}

    def get_security_requirement(self, auto_schema):
        # The same bearer scheme the API key's extension already lists on every operation: no
        # second entry (the document is the same whether or not this module was imported first).
        return []
