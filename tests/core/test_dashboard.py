"""The operator pages: the dashboard (admin index) with real numbers, storage per workspace,
stuck intents flagged with a link to act, session pages with paged events and resources and no
edit buttons, file pages with a download link and a link to their session."""

import re
from html import unescape

import pytest
from django.test import Client

from core import heartbeats
from core.services import api_key_create
from files.models import StorageIntent
from sessions.services.events import session_event_append
from tests.factories import make_session
from tests.files.conftest import make_file
from tests.files.test_services import _age, interrupted_put

pytestmark = pytest.mark.django_db


def _session(workspace, *, events: int = 0):
    session = make_session(workspace, title="t")
    for n in range(events):
        session_event_append(session_id=session.id, type="agent.message", payload={"content": [{"text": f"m{n}"}]})
    return session


def _text(html: bytes) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.decode()))


def test_dashboard_shows_storage_intents_sessions_and_workers(admin_client, s3_bucket):
    small, _ = api_key_create(workspace_name="dash-small")
    big, _ = api_key_create(workspace_name="dash-big")
    make_file(small.workspace, b"x" * 1500)
    make_file(big.workspace, b"y" * (2 * 1024 * 1024))
    make_file(big.workspace, b"z" * 10)
    stuck = interrupted_put(small.workspace)
    _age([stuck])
    interrupted_put(big.workspace)  # fresh: maybe live, not stuck
    session = _session(small.workspace)
    error = {
        "type": "model_request_failed_error",
        "message": "upstream unreachable",
        "retry_status": {"type": "exhausted"},
    }
    session_event_append(session_id=session.id, type="session.error", payload={"error": error})
    heartbeats.worker_beat(hostname="dash@test", queues=["dash-queue"])
    try:
        response = admin_client.get("/admin/")
    finally:
        heartbeats.worker_gone(hostname="dash@test", queues=["dash-queue"])
    assert response.status_code == 200
    page = _text(response.content)
    assert "Operator dashboard" in page
    assert "3 files" in page and "2.0 MB stored" in page
    # Per workspace, biggest first, human-readable, linked to the workspace's files.
    assert page.index("dash-big 2 2.0 MB") < page.index("dash-small 1 1.5 KB")
    html = response.content.decode()
    assert f"/admin/files/file/?workspace__id__exact={small.workspace.id}" in html
    # Open intents by kind and age; the stuck one flagged with a link to reconcile it.
    assert "1 stuck — reconcile" in page
    assert "/admin/files/storageintent/?state__exact=open&amp;kind__exact=upload&amp;idle=stuck" in html
    assert "1 session.error in the last hour" in page
    assert "upstream unreachable" in page
    assert "dash@test" in page and "dash-queue" in page
    assert "sandboxes running" in page
    # Counts agree with their nouns, and no "View site" link leads to the API's 404 at "/".
    assert "(1 session)" in page and not re.search(r"\b1 sessions\b", page)
    assert "View site" not in page
    # The stuck filter lists the stuck intent only, with its error column on screen.
    StorageIntent.objects.filter(pk=stuck.pk).update(last_error="reconcile: store down")
    _age([stuck])
    listing = admin_client.get("/admin/files/storageintent/?state__exact=open&kind__exact=upload&idle=stuck")
    assert "reconcile: store down" in listing.content.decode()
    assert "(stuck)" in _text(listing.content)
    assert len(re.findall(r'name="_selected_action"', listing.content.decode())) == 1


def test_session_page_is_a_transcript_with_the_newest_turn_and_no_edit_buttons(admin_client, api_key, settings):
    from sessions import admin as session_admin

    settings.DEBUG = False
    session_admin.TRANSCRIPT_EVENTS, saved = 20, session_admin.TRANSCRIPT_EVENTS
    try:
        session = _session(api_key.workspace, events=45)
        first = admin_client.get(f"/admin/agent_sessions/session/{session.id}/change/")
        assert first.status_code == 200
        html = unescape(first.content.decode())
        assert "Transcript (45 events)" in html
        text = _text(first.content)
        # The latest events (the newest turn in view), as text, not JSON; older ones a page back.
        assert " m44 " in text and " m25 " in text and " m24 " not in text and '"text"' not in html
        assert "?before=26" in html
        older = admin_client.get(f"/admin/agent_sessions/session/{session.id}/change/?before=26")
        assert " m24 " in _text(older.content) and " m44 " not in _text(older.content)
    finally:
        session_admin.TRANSCRIPT_EVENTS = saved
    assert "Resources (0)" in html and "No resources mounted." in html
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert f"/admin/agent_sessions/session/{session.id}/delete/" not in html
    assert admin_client.post(f"/admin/agent_sessions/session/{session.id}/change/", {}).status_code == 403


def test_the_session_pages_feed_and_actions_go_through_the_services(admin_client, api_key, s3_bucket):
    session = _session(api_key.workspace, events=2)
    feed = admin_client.get(f"/admin/agent_sessions/session/{session.id}/transcript/?after=1").json()
    assert feed["last_seq"] == 2 and "m1" in feed["html"] and "m0" not in feed["html"] and feed["status"] == "idle"
    tool_use = {"name": "bash", "input": {"command": "echo <b>hi</b>"}, "id": "toolu_1"}
    session_event_append(session_id=session.id, type="agent.tool_use", payload=tool_use)
    fresh = admin_client.get(f"/admin/agent_sessions/session/{session.id}/transcript/?after=2").json()
    assert fresh["last_seq"] == 3 and "echo &lt;b&gt;hi&lt;/b&gt;" in fresh["html"]  # tenant text is escaped
    assert admin_client.get(f"/admin/agent_sessions/session/{session.id}/act/interrupt/").status_code == 405
    acted = admin_client.post(f"/admin/agent_sessions/session/{session.id}/act/interrupt/")
    assert acted.status_code == 302
    assert session.events.filter(type="user.interrupt").count() == 1
    admin_client.post(f"/admin/agent_sessions/session/{session.id}/act/archive/")
    session.refresh_from_db()
    assert session.archived_at is not None
    gone = admin_client.post(f"/admin/agent_sessions/session/{session.id}/act/delete/")
    assert gone.status_code == 302 and gone["location"].endswith("/admin/agent_sessions/session/")
    session.refresh_from_db()
    assert session.deleted_at is not None
    assert admin_client.post(f"/admin/agent_sessions/session/{session.id}/act/archive/").status_code == 404
    assert admin_client.get("/admin/agent_sessions/session/sesn_nope/transcript/").status_code == 404
    assert Client().get(f"/admin/agent_sessions/session/{session.id}/transcript/").status_code == 302  # login


def test_file_page_has_a_download_link_and_a_link_to_its_session(admin_client, api_key, s3_bucket):
    session = _session(api_key.workspace)
    output = make_file(
        api_key.workspace, b"report bytes", filename="report.txt", downloadable=True, scope_session_id=session.id
    )
    upload = make_file(api_key.workspace, b"client bytes", filename="mine.txt")
    html = admin_client.get(f"/admin/files/file/{output.id}/change/").content.decode()
    assert f"/admin/files/file/{output.id}/download/" in html
    assert f'href="/admin/agent_sessions/session/{session.id}/change/"' in html
    assert 'name="_save"' not in html
    download = admin_client.get(f"/admin/files/file/{output.id}/download/")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == b"report bytes"
    assert "report.txt" in download["Content-Disposition"]
    html = admin_client.get(f"/admin/files/file/{upload.id}/change/").content.decode()
    assert f"/admin/files/file/{upload.id}/download/" not in html and "not downloadable" in html
    assert admin_client.get(f"/admin/files/file/{upload.id}/download/").status_code == 404
    listing = _text(admin_client.get("/admin/files/file/").content)
    assert "12 bytes" in listing


def test_workspace_list_shows_storage_used(admin_client, api_key, s3_bucket):
    make_file(api_key.workspace, b"a" * 3000)
    make_file(api_key.workspace, b"b" * 3000)
    page = _text(admin_client.get("/admin/core/workspace/").content)
    assert f"{api_key.workspace.name} {api_key.workspace.id}" in page
    assert "5.9 KB" in page
