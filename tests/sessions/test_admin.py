import pytest

from sessions.models import Session
from sessions.services.agents import agent_create
from sessions.services.environments import environment_create
from sessions.services.events import session_event_append
from sessions.services.sessions import session_create

pytestmark = pytest.mark.django_db


def test_admin_pages_show_sessions_events_and_errors(admin_client, api_key):
    workspace = api_key.workspace
    agent, _ = agent_create(workspace=workspace, fields={"name": "a", "model": {"id": "m"}, "tools": []})
    env = environment_create(
        workspace=workspace, name="e", config={"type": "self_hosted"}, description=None, metadata={}, scope=None
    )
    session = session_create(
        workspace=workspace,
        agent=agent.id,
        environment_id=env.id,
        metadata={},
        title="t",
        initial_events=[],
        resources=[],
    )
    error = {"type": "model_overloaded_error", "message": "busy", "retry_status": {"type": "exhausted"}}
    session_event_append(session_id=session.id, type="session.error", payload={"error": error})
    Session.objects.filter(id=session.id).update(last_error="model_overloaded_error: busy")

    assert admin_client.get("/admin/agent_sessions/session/").status_code == 200
    page = admin_client.get(f"/admin/agent_sessions/session/{session.id}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "session.error" in body
    assert "model_overloaded_error" in body
    assert "Sandbox (live)" in body
    assert admin_client.get(f"/admin/agent_sessions/agent/{agent.id}/change/").status_code == 200
    assert admin_client.get(f"/admin/agent_sessions/environment/{env.id}/change/").status_code == 200
    assert admin_client.get("/admin/agent_sessions/agent/").status_code == 200
