import pytest

from agents.services import agent_create, environment_create
from sessions.models import Session
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
    assert "Sandbox checkpoint" in body
    assert admin_client.get(f"/admin/agents/agent/{agent.id}/change/").status_code == 200
    assert admin_client.get(f"/admin/agents/environment/{env.id}/change/").status_code == 200
    assert admin_client.get("/admin/agents/agent/").status_code == 200


def test_admin_lists_memory_stores_with_size_and_counts(admin_client, api_key):
    from memory.services import api_actor, memory_create, memory_store_create, memory_update

    workspace = api_key.workspace
    store = memory_store_create(workspace=workspace, name="prefs", description="", metadata={})
    actor = api_actor(api_key.row)
    memory = memory_create(workspace=workspace, memory_store_id=store.id, path="/a.md", content="abc", actor=actor)
    memory_create(workspace=workspace, memory_store_id=store.id, path="/b.md", content="héllo", actor=actor)
    memory_update(
        workspace=workspace,
        memory_store_id=store.id,
        memory_id=memory.id,
        path=None,
        content="abcd",
        expected_sha256=None,
        actor=actor,
    )
    page = admin_client.get(f"/admin/memory/memorystore/?workspace__id__exact={workspace.id}")
    assert page.status_code == 200
    body = page.content.decode()
    # 2 memories, 4 + 6 bytes of current content, 3 versions.
    row = body[body.index(store.id) :].split("</tr>")[0]
    cells = [cell.split(">")[-1] for cell in row.split("</td>")[:-1]]
    assert cells[-5:-2] == ["2", "10", "3"], cells
    assert admin_client.get(f"/admin/memory/memorystore/{store.id}/change/").status_code == 200
