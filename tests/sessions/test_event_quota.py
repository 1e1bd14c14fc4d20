"""The per-workspace event-log storage quota (MANGO_WORKSPACE_EVENTS_MAX_BYTES, services.event_bytes):
every append counts its JSON bytes on the session row; a client event that would take the
workspace over the quota is refused with the Files quota's envelope and stores nothing; another
workspace is untouched; deleting sessions purges their logs and frees the quota."""

import json

import anthropic
import pytest
from django.db import connection, transaction

from sessions.models import Session, SessionEvent
from sessions.services.events import events_append_locked
from sessions.services.sessions import deleted_session_logs_purge
from tests.factories import make_session

# The sessions' turns go to a queue no worker reads: their logs hold only what these tests append.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_turns")]


def message(text: str) -> list[dict]:
    return [{"type": "user.message", "content": [{"type": "text", "text": text}]}]


def stored_bytes(session_id: str) -> int:
    """The log's size as PostgreSQL renders it (the migration's backfill formula)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(octet_length(payload::text) + octet_length(private::text)), 0)"
            " FROM agent_sessions_sessionevent WHERE session_id = %s",
            [session_id],
        )
        return cursor.fetchone()[0]


def counted(session_id: str) -> int:
    return Session.objects.get(pk=session_id).event_bytes


def test_each_append_counts_what_the_database_stores(sdk, api_key):
    session = make_session(api_key.workspace)
    for text in ("hello", "a longer message " * 50):
        sdk.beta.sessions.events.send(session.id, events=message(text))
    sdk.beta.sessions.update(session.id, title="t")  # a server event (session.updated) counts too
    assert SessionEvent.objects.filter(session_id=session.id).count() == 3
    assert counted(session.id) == stored_bytes(session.id) > 900


def test_over_the_quota_is_refused_stores_nothing_and_spares_other_workspaces(
    sdk, api_key, other_api_key, live_server, settings
):
    first, second = make_session(api_key.workspace, name="a"), make_session(api_key.workspace, name="b")
    sdk.beta.sessions.events.send(first.id, events=message("x" * 600))
    used = counted(first.id)
    settings.MANGO_WORKSPACE_EVENTS_MAX_BYTES = used + 700  # room for about one more such event

    sdk.beta.sessions.events.send(second.id, events=message("y" * 100))  # under: accepted
    events_before = SessionEvent.objects.count()
    with pytest.raises(anthropic.BadRequestError) as raised:  # the sum over both sessions counts
        sdk.beta.sessions.events.send(second.id, events=message("z" * 600))
    error = raised.value.body["error"]
    assert error["type"] == "invalid_request_error"
    assert error["details"]["error_code"] == "storage_quota_exceeded"
    assert f"({used + 700} bytes)" in error["message"]
    assert SessionEvent.objects.count() == events_before
    assert [e.type for e in sdk.beta.sessions.events.list(second.id)] == ["user.message"]

    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    theirs = make_session(other_api_key.workspace, name="c")
    other.beta.sessions.events.send(theirs.id, events=message("w" * 600))  # its own quota


def test_deleting_sessions_purges_their_logs_and_frees_the_quota(sdk, api_key, settings):
    kept, dropped = make_session(api_key.workspace, name="a"), make_session(api_key.workspace, name="b")
    sdk.beta.sessions.events.send(dropped.id, events=message("x" * 2000))
    settings.MANGO_WORKSPACE_EVENTS_MAX_BYTES = counted(dropped.id) + 100
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(kept.id, events=message("y" * 500))

    sdk.beta.sessions.delete(dropped.id)
    assert list(SessionEvent.objects.filter(session_id=dropped.id).values_list("type", flat=True)) == [
        "session.deleted"
    ]
    assert counted(dropped.id) == 0
    sdk.beta.sessions.events.send(kept.id, events=message("y" * 500))


def test_the_sweep_purges_what_a_runner_appended_after_the_delete(sdk, api_key):
    session = make_session(api_key.workspace)
    sdk.beta.sessions.delete(session.id)
    with transaction.atomic():  # a late runner's append to the deleted session
        locked = Session.objects.select_for_update().get(pk=session.id)
        events_append_locked(session=locked, items=[{"type": "agent.message", "payload": {"content": []}}])
    assert counted(session.id) > 0

    assert deleted_session_logs_purge(older_than_seconds=3600) == 0  # too recent: left for now
    assert deleted_session_logs_purge(older_than_seconds=0) == 1
    assert counted(session.id) == 0
    assert list(SessionEvent.objects.filter(session_id=session.id).values_list("type", flat=True)) == [
        "session.deleted"
    ]


def test_the_workspace_sum_is_read_once_per_few_seconds_not_per_event(api, api_key):
    """A workspace with many sessions must not pay a sum over all of them on every event."""
    from django.test.utils import CaptureQueriesContext

    session = make_session(api_key.workspace)
    body = json.dumps({"events": message("hi")})
    sums = []
    for _ in range(3):
        with CaptureQueriesContext(connection) as queries:
            response = api.post(f"/v1/sessions/{session.id}/events", body, content_type="application/json")
        assert response.status_code == 200, response.content
        sums.append(sum('SUM("agent_sessions_session"."event_bytes")' in q["sql"] for q in queries.captured_queries))
    assert sums == [1, 0, 0], sums
