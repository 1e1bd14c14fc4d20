"""The event vocabulary: one list of types (the model field's choices), the pure transcript
renderer agrees with it, and session.error payloads never carry upstream text or addresses."""

import socket

import pytest
from django.test import override_settings

from processors import conversation
from sessions import events as ev
from sessions.events import EventType
from sessions.models import SessionEvent
from sessions.runtime import model as turn_model
from sessions.runtime import upstream
from tests.factories import make_session


def test_event_type_is_a_choice_field_over_the_vocabulary():
    field = SessionEvent._meta.get_field("type")
    assert {value for value, _ in field.choices} == set(EventType.values)
    assert set(ev.CLIENT_EVENT_TYPES) <= set(EventType.values)
    assert set(ev.CONVERSATION_TYPES) <= set(EventType.values)


def test_the_pure_renderer_names_only_known_event_types():
    names = set(conversation.USER_SIDE) | set(conversation.TOOL_USES) | set(conversation.TOOL_RESULTS)
    assert names <= set(EventType.values)
    assert names <= set(ev.CONVERSATION_TYPES)


def test_session_error_payload_shape():
    assert ev.session_error(message="m") == {
        "error": {"type": "unknown_error", "message": "m", "retry_status": {"type": "exhausted"}}
    }
    retrying = ev.session_error(message="m", error_type=ev.ErrorType.MODEL_OVERLOADED, retrying=True)
    assert retrying["error"]["type"] == "model_overloaded_error"
    assert retrying["error"]["retry_status"] == {"type": "retrying"}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_upstream_names_the_url_it_tried_and_the_settings():
    port = _closed_port()
    base_url = f"http://user:secret@127.0.0.1:{port}/internal-gateway"
    with (
        override_settings(ANTHROPIC_BASE_URL=base_url, MANGO_MODEL_TIMEOUT_SECONDS=5),
        pytest.raises(upstream.ModelError) as caught,
    ):
        upstream.messages_create(
            model="claude-sonnet-4-5",
            system=None,
            messages=[{"role": "user", "content": "hi"}],
            tools=[],
            max_tokens=16,
        )
    error = caught.value
    assert error.retryable and error.error_type == "model_request_failed_error"
    # What a client (and the start-up warning) sees: the URL tried, without its credentials; the
    # reason in the system's words; the two settings to check.
    assert error.message == (
        f"The model upstream at http://127.0.0.1:{port}/internal-gateway could not be reached "
        "([Errno 111] Connection refused); check ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY."
    )
    assert "secret" not in error.message and "secret" not in error.detail
    # The worker's log line names it too, not only the exception's class.
    assert error.detail == f"http://127.0.0.1:{port}/internal-gateway unreachable: [Errno 111] Connection refused"


@pytest.mark.django_db
def test_a_recorded_model_error_keeps_the_detail_off_the_event(api_key):
    workspace = api_key.workspace
    session = make_session(workspace)
    failure = upstream.ModelError(
        "The model upstream at https://gateway.example could not be reached (timed out); check ANTHROPIC_BASE_URL.",
        error_type=ev.ErrorType.MODEL_REQUEST_FAILED,
        retryable=True,
        detail="https://gateway.example unreachable: [Errno 111] via 10.1.2.3",
    )
    turn_model.model_error_record(session_id=session.id, exc=failure, retrying=True)
    stored = list(SessionEvent.objects.filter(session_id=session.id).order_by("seq"))
    assert [e.type for e in stored] == ["session.error", "session.status_rescheduled"]
    assert "10.1.2.3" not in str(stored[0].payload)
    assert stored[0].payload["error"]["message"].endswith("check ANTHROPIC_BASE_URL.")
    session.refresh_from_db()
    assert "10.1.2.3" in session.last_error
