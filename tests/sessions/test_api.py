"""Agents, environments, sessions and events through the official SDK (strict response
validation) against the live server. No worker needed: nothing here runs a turn (and none may:
when an earlier test of the run started the worker, the event logs checked here would grow)."""

import anthropic
import pytest

from sessions.models import SessionEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_turns")]

MODEL = "claude-sonnet-4-5"


def _agent(sdk, **kwargs):
    return sdk.beta.agents.create(name=kwargs.pop("name", "a"), model=kwargs.pop("model", MODEL), **kwargs)


def _env(sdk, **kwargs):
    return sdk.beta.environments.create(name=kwargs.pop("name", "e"), **kwargs)


# --- agents ----------------------------------------------------------------------------------


def test_agent_create_resolves_model_and_tools(sdk):
    agent = _agent(
        sdk,
        system="sys",
        description="desc",
        metadata={"team": "x"},
        tools=[
            {"type": "agent_toolset_20260401", "configs": [{"name": "web_search", "enabled": False}]},
            {"type": "custom", "name": "lookup", "description": "Look up", "input_schema": {"type": "object"}},
        ],
    )
    assert agent.id.startswith("agent_") and agent.version == 1 and agent.type == "agent"
    assert agent.model.id == MODEL
    assert agent.metadata == {"team": "x"}
    assert agent.execution_identity.type == "service_account"
    toolset, custom = agent.tools
    assert toolset.type == "agent_toolset_20260401"
    assert toolset.default_config.enabled is True
    assert toolset.default_config.permission_policy.type == "always_allow"
    by_name = {c.name: c for c in toolset.configs}
    assert set(by_name) == {"bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"}
    assert by_name["web_search"].enabled is False and by_name["bash"].enabled is True
    assert custom.type == "custom" and custom.name == "lookup"

    effort = _agent(sdk, model={"id": MODEL, "effort": "high", "speed": "fast"})
    assert effort.model.effort.type == "high" and effort.model.speed == "fast"


def test_agent_update_versions_and_optimistic_concurrency(sdk):
    agent = _agent(sdk, metadata={"a": "1", "b": "2"})
    updated = sdk.beta.agents.update(agent.id, version=1, name="renamed", metadata={"a": None, "c": "3"})
    assert updated.version == 2 and updated.name == "renamed"
    assert updated.metadata == {"b": "2", "c": "3"}
    assert updated.model.id == MODEL  # untouched fields carry over

    with pytest.raises(anthropic.ConflictError) as excinfo:
        sdk.beta.agents.update(agent.id, version=1, name="stale")
    assert excinfo.value.response.headers["x-should-retry"] == "false"
    assert excinfo.value.status_code == 409

    assert sdk.beta.agents.retrieve(agent.id).version == 2
    first = sdk.beta.agents.retrieve(agent.id, version=1)
    assert first.version == 1 and first.name == "a"
    versions = list(sdk.beta.agents.versions.list(agent.id))
    assert [v.version for v in versions] == [2, 1]


def test_agent_list_archive_and_validation(sdk):
    first, second = _agent(sdk, name="one"), _agent(sdk, name="two")
    listed = [a.id for a in sdk.beta.agents.list()]
    assert listed == [second.id, first.id]
    archived = sdk.beta.agents.archive(first.id)
    assert archived.archived_at is not None
    assert [a.id for a in sdk.beta.agents.list()] == [second.id]
    assert {a.id for a in sdk.beta.agents.list(include_archived=True)} == {first.id, second.id}
    page = sdk.beta.agents.list(limit=1, include_archived=True)
    assert len(page.data) == 1 and page.next_page
    assert [a.id for a in sdk.beta.agents.list(limit=1, include_archived=True)] == [second.id, first.id]

    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.agents.create(name="x", model=MODEL, tools=[{"type": "nope"}])
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.agents.create(name="x", model=MODEL, metadata={f"k{i}": "v" for i in range(17)})
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.agents.retrieve("agent_missing")


# --- environments ----------------------------------------------------------------------------


def test_environment_lifecycle(sdk):
    default = _env(sdk)
    assert default.config.type == "cloud"
    assert default.config.networking.type == "limited"
    assert default.config.packages.pip == []
    env = _env(sdk, name="net", config={"type": "cloud", "networking": {"type": "unrestricted"}}, metadata={"k": "v"})
    assert env.id.startswith("env_") and env.config.networking.type == "unrestricted"
    updated = sdk.beta.environments.update(env.id, description="d", metadata={"k": None, "n": "1"})
    assert updated.description == "d" and updated.metadata == {"n": "1"}
    # An environment's metadata loses a key set to an empty string (the SDK says so for environments).
    assert sdk.beta.environments.update(env.id, metadata={"n": ""}).metadata == {}
    assert updated.config.networking.type == "unrestricted"
    with pytest.raises(anthropic.BadRequestError) as excinfo:
        sdk.beta.environments.update(env.id, config={"type": "self_hosted"})
    assert excinfo.value.body["error"]["details"]["error_code"] == "invalid_config_type_change"
    assert {e.id for e in sdk.beta.environments.list()} == {default.id, env.id}
    archived = sdk.beta.environments.archive(env.id)
    assert archived.archived_at is not None
    assert [e.id for e in sdk.beta.environments.list()] == [default.id]
    agent = _agent(sdk)
    with pytest.raises(anthropic.BadRequestError) as excinfo:
        sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert excinfo.value.body["error"]["details"]["error_code"] == "environment_archived"
    deleted = sdk.beta.environments.delete(env.id)
    assert deleted.type == "environment_deleted" and deleted.id == env.id
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.environments.retrieve(env.id)
    self_hosted = _env(sdk, config={"type": "self_hosted"})
    assert self_hosted.config.type == "self_hosted"
    # `account` visibility is not served (the workspace sees every environment): a 400 naming scope.
    assert _env(sdk, name="org", scope="organization").scope == "organization"
    for refused in (
        lambda: _env(sdk, scope="account"),
        lambda: sdk.beta.environments.update(default.id, scope="account"),
    ):
        with pytest.raises(anthropic.BadRequestError, match="scope: 'account' cannot be honoured"):
            refused()


# --- sessions --------------------------------------------------------------------------------


def test_session_create_retrieve_update_archive(sdk):
    agent, env = _agent(sdk, system="v1"), _env(sdk)
    sdk.beta.agents.update(agent.id, version=1, system="v2")
    session = sdk.beta.sessions.create(
        agent={"type": "agent", "id": agent.id, "version": 1},
        environment_id=env.id,
        title="t",
        metadata={"k": "v"},
        resources=[],
    )
    assert session.id.startswith("sesn_") and session.status == "idle"
    assert session.agent.version == 1 and session.agent.system == "v1"
    assert session.environment_id == env.id and session.resources == [] and session.vault_ids == []
    latest = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert latest.agent.version == 2 and latest.agent.system == "v2"

    got = sdk.beta.sessions.retrieve(session.id)
    assert got.title == "t" and got.metadata == {"k": "v"}
    updated = sdk.beta.sessions.update(session.id, title="new", metadata={"k": None, "x": "y"})
    assert updated.title == "new" and updated.metadata == {"x": "y"}
    assert [e.type for e in sdk.beta.sessions.events.list(session.id)] == ["session.updated"]
    # A session's metadata patch upserts any string, the empty one too; only null deletes.
    assert sdk.beta.sessions.update(session.id, metadata={"x": ""}).metadata == {"x": ""}
    assert sdk.beta.sessions.update(session.id, metadata={"x": "y"}).metadata == {"x": "y"}
    archived = sdk.beta.sessions.archive(session.id)
    assert archived.archived_at is not None and archived.status == "terminated"  # no turn ran: at once
    assert [e.type for e in sdk.beta.sessions.events.list(session.id)][-1] == "session.status_terminated"
    assert sdk.beta.sessions.archive(session.id).archived_at == archived.archived_at  # once
    assert [e.type for e in sdk.beta.sessions.events.list(session.id)].count("session.status_terminated") == 1
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])

    with pytest.raises(anthropic.NotFoundError) as excinfo:
        sdk.beta.sessions.create(agent=agent.id, environment_id="env_missing")
    assert excinfo.value.body["error"]["details"]["error_code"] == "environment_not_found"
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.create(agent="agent_missing", environment_id=env.id)


def test_session_list_filters_and_pages(sdk):
    first_agent, second_agent, env = _agent(sdk), _agent(sdk), _env(sdk)
    sessions = [sdk.beta.sessions.create(agent=first_agent.id, environment_id=env.id) for _ in range(3)]
    other = sdk.beta.sessions.create(agent=second_agent.id, environment_id=env.id)
    assert [s.id for s in sdk.beta.sessions.list()] == [other.id, *[s.id for s in reversed(sessions)]]
    assert [s.id for s in sdk.beta.sessions.list(agent_id=second_agent.id)] == [other.id]
    assert next(s.id for s in sdk.beta.sessions.list(order="asc")) == sessions[0].id
    assert len(list(sdk.beta.sessions.list(statuses=["idle"]))) == 4
    assert list(sdk.beta.sessions.list(statuses=["running"])) == []
    page = sdk.beta.sessions.list(limit=2)
    assert len(page.data) == 2 and page.next_page and page.prev_page is None
    assert len(list(sdk.beta.sessions.list(limit=2))) == 4
    second_page = page.get_next_page()
    assert [s.id for s in second_page.data] == [sessions[1].id, sessions[0].id]
    assert second_page.prev_page
    created = sessions[1].created_at
    assert {s.id for s in sdk.beta.sessions.list(created_at_gte=created, agent_id=first_agent.id)} == {
        sessions[1].id,
        sessions[2].id,
    }
    sdk.beta.sessions.archive(sessions[0].id)
    assert sessions[0].id not in [s.id for s in sdk.beta.sessions.list()]
    assert sessions[0].id in [s.id for s in sdk.beta.sessions.list(include_archived=True)]


def test_initial_events_are_appended_in_order_and_limited(sdk):
    agent, env = _agent(sdk), _env(sdk)
    events = [{"type": "user.message", "content": [{"type": "text", "text": str(i)}]} for i in range(3)]
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, initial_events=events)
    stored = list(SessionEvent.objects.filter(session_id=session.id).order_by("seq"))
    assert [e.payload["content"][0]["text"] for e in stored] == ["0", "1", "2"]
    assert [e.seq for e in stored] == [1, 2, 3]
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, initial_events=events * 17)
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, initial_events=[{"type": "user.interrupt"}])


def test_event_send_validation_and_list_paging(sdk):
    agent, env = _agent(sdk), _env(sdk)
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(session.id, events=[{"type": "agent.message", "content": []}])
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.message", "content": []}])
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope"}]
        )
    outcome = sdk.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}}],
    )
    assert outcome.data[0].outcome_id.startswith("outc_")
    messages = [{"type": "user.message", "content": [{"type": "text", "text": str(i)}]} for i in range(5)]
    sdk.beta.sessions.events.send(session.id, events=messages)
    page = sdk.beta.sessions.events.list(session.id, limit=2)
    assert len(page.data) == 2 and page.next_page
    everything = list(sdk.beta.sessions.events.list(session.id, limit=2))
    assert [e.type for e in everything] == ["user.define_outcome"] + ["user.message"] * 5
    newest = sdk.beta.sessions.events.list(session.id, order="desc", limit=1).data[0]
    assert newest.content[0].text == "4"


def test_workspace_isolation(sdk, live_server, other_api_key):
    agent, env = _agent(sdk), _env(sdk)
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    for call in (
        lambda: other.beta.agents.retrieve(agent.id),
        lambda: other.beta.environments.retrieve(env.id),
        lambda: other.beta.sessions.retrieve(session.id),
        lambda: other.beta.sessions.events.list(session.id).data,
        lambda: other.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}]),
        lambda: other.beta.sessions.delete(session.id),
        lambda: other.beta.sessions.create(agent=agent.id, environment_id=env.id),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert list(other.beta.sessions.list()) == []
    assert list(other.beta.agents.list()) == []


def test_raw_wire_shapes(api, api_key):
    """Paths without trailing slashes, POST updates, bracketed query arrays, empty-body archive."""
    agent = api.post("/v1/agents", {"name": "a", "model": MODEL}, content_type="application/json").json()
    env = api.post("/v1/environments", {"name": "e"}, content_type="application/json").json()
    session = api.post(
        "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"]}, content_type="application/json"
    ).json()
    listed = api.get("/v1/sessions?statuses[]=idle&statuses[]=running").json()
    assert [s["id"] for s in listed["data"]] == [session["id"]]
    assert listed["next_page"] is None and listed["prev_page"] is None
    archived = api.post(f"/v1/sessions/{session['id']}/archive", content_type="application/json")
    assert archived.status_code == 200
    assert api.get(f"/v1/sessions/{session['id']}/").status_code == 404
    assert session["created_at"].endswith("Z")
    response = api.post(f"/v1/agents/{agent['id']}", {"version": 7, "name": "x"}, content_type="application/json")
    assert response.status_code == 409 and response.headers["x-should-retry"] == "false"
    assert response.json()["error"]["type"] == "conflict_error"


def test_strict_mode_requires_the_agents_beta_header(api, settings):
    settings.MANGO_STRICT = True
    response = api.get("/v1/agents")
    assert response.status_code == 400
    assert "managed-agents-2026-04-01" in response.json()["error"]["message"]
    ok = api.get("/v1/agents", headers={"anthropic-beta": "files-api-2025-04-14, managed-agents-2026-04-01"})
    assert ok.status_code == 200
