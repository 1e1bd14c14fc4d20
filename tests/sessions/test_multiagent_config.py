"""Multiagent configuration (issue 39, point 1): `multiagent` on agents create and update through
the SDK with strict response validation — the roster resolved to concrete versions, the
multiagent_20261001 merge rules and defaults, the refusals naming their field — and the session's copy of
every roster agent's full definition (agent_with_overrides applying to `self`)."""

import anthropic
import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

MODEL = "claude-sonnet-4-5"
BASH = [{"type": "agent_toolset_20260401"}]
DISABLED = {"type": "disabled"}


def _agent(sdk, name, **extra):
    return sdk.beta.agents.create(name=name, model=MODEL, tools=BASH, **extra)


def test_a_coordinator_roster_resolves_to_versions_and_the_session_shows_definitions(sdk):
    worker = _agent(sdk, "worker", system="work")
    sdk.beta.agents.update(worker.id, version=1, system="work harder")  # version 2: the latest
    pinned = _agent(sdk, "pinned")
    coordinator = _agent(
        sdk,
        "lead",
        system="lead",
        multiagent={
            "type": "coordinator",
            "agents": [worker.id, {"type": "agent", "id": pinned.id, "version": 1}, {"type": "self"}],
        },
    )
    assert coordinator.multiagent.type == "coordinator"
    assert [(a.id, a.version) for a in coordinator.multiagent.agents] == [
        (worker.id, 2),
        (pinned.id, 1),
        (coordinator.id, 1),
    ]
    assert sdk.beta.agents.retrieve(coordinator.id).multiagent == coordinator.multiagent

    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(
        agent={"type": "agent_with_overrides", "id": coordinator.id, "system": "lead, overridden"},
        environment_id=env.id,
    )
    roster = session.agent.multiagent.agents
    assert [(a.id, a.version, a.system) for a in roster] == [
        (worker.id, 2, "work harder"),
        (pinned.id, 1, None),
        # `self`: the session's own agent, overrides applied (the SDK: they apply to the
        # coordinator and its self copies).
        (coordinator.id, 1, "lead, overridden"),
    ]
    assert all(a.type == "agent" and a.model.id == MODEL and a.tools for a in roster)
    # A later version of a roster agent changes nothing in a session already made.
    sdk.beta.agents.update(worker.id, version=2, system="changed")
    again = sdk.beta.sessions.retrieve(session.id).agent.multiagent.agents
    assert again[0].system == "work harder"


def test_multiagent_20261001_merges_level_by_level(sdk):
    a, b = _agent(sdk, "a"), _agent(sdk, "b")
    agent = _agent(
        sdk,
        "m",
        multiagent={
            "type": "multiagent_20261001",
            "subagents": {"type": "enabled", "inline_agents": DISABLED, "predefined_agents": [a.id]},
            "workflows": DISABLED,
        },
    )
    config = agent.multiagent
    assert config.type == "multiagent_20261001" and config.advisor.type == "disabled"
    assert config.workflows.type == "disabled" and config.subagents.inline_agents.type == "disabled"
    assert [(r.id, r.version) for r in config.subagents.predefined_agents] == [(a.id, 1)]

    # A sent predefined_agents list replaces the stored one; the omitted members keep theirs.
    updated = sdk.beta.agents.update(
        agent.id,
        version=1,
        multiagent={"type": "multiagent_20261001", "subagents": {"type": "enabled", "predefined_agents": [b.id]}},
    )
    assert [r.id for r in updated.multiagent.subagents.predefined_agents] == [b.id]
    assert updated.multiagent.subagents.inline_agents.type == "disabled"  # kept (omitted)
    assert updated.multiagent.workflows.type == "disabled"  # kept (omitted)
    # Omitting multiagent keeps it; null clears it.
    assert sdk.beta.agents.update(agent.id, version=2, name="m2").multiagent == updated.multiagent
    assert sdk.beta.agents.update(agent.id, version=3, multiagent=None).multiagent is None

    # The defaults otherwise: subagents enabled with inline agents, no predefined ones.
    inline = _agent(sdk, "inline", multiagent={"type": "multiagent_20261001", "workflows": DISABLED})
    assert inline.multiagent.subagents.type == "enabled" and inline.multiagent.subagents.inline_agents.type == "enabled"
    assert inline.multiagent.subagents.predefined_agents == [] and inline.multiagent.advisor.type == "disabled"
    # Subagents disabled: nothing to spawn, nothing refused.
    off = _agent(sdk, "off", multiagent={"type": "multiagent_20261001", "subagents": DISABLED, "workflows": DISABLED})
    assert off.multiagent.subagents.type == "disabled"


@pytest.mark.parametrize(
    ("multiagent", "field"),
    [
        (
            {"type": "multiagent_20261001", "workflows": {"type": "enabled", "inline_agents": DISABLED}},
            "multiagent.workflows.predefined_agents",
        ),
        (
            {"type": "multiagent_20261001", "workflows": {"type": "enabled", "predefined_agents": ["agent_unknown"]}},
            "multiagent.workflows.predefined_agents[0]",
        ),
        (
            {"type": "multiagent_20261001", "workflows": DISABLED, "advisor": {"type": "enabled"}},
            "multiagent.advisor.model",
        ),
        (
            {
                "type": "multiagent_20261001",
                "workflows": DISABLED,
                "subagents": {"type": "enabled", "inline_agents": DISABLED},
            },
            "multiagent.subagents.predefined_agents",
        ),
        (
            {
                "type": "coordinator",
                "agents": [{"type": "advisor", "model": MODEL}, {"type": "advisor", "model": MODEL}],
            },
            "multiagent.agents[1]",
        ),
        ({"type": "coordinator", "agents": []}, "multiagent.agents"),
        ({"type": "coordinator", "agents": ["agent_unknown"]}, "multiagent.agents[0]"),
        ({"type": "coordinator", "agents": [{"type": "self"}, {"type": "self"}]}, "multiagent.agents[1]"),
        ({"type": "coordinator", "agents": [f"agent_{i}" for i in range(21)]}, "multiagent.agents"),
        ({"type": "coordinator"}, "multiagent.agents"),
        ({"type": "swarm"}, "multiagent"),
    ],
)
def test_refused_configurations_name_their_field(sdk, multiagent, field):
    with pytest.raises(anthropic.BadRequestError) as refused:
        _agent(sdk, "x", multiagent=multiagent)
    assert refused.value.body["error"]["message"].startswith(f"{field}: "), refused.value.body


def test_rosters_are_depth_one_distinct_and_live(sdk):
    worker = _agent(sdk, "worker")
    lead = _agent(sdk, "lead", multiagent={"type": "coordinator", "agents": [worker.id]})
    # A coordinator in a roster (depth limit 1): a cycle lead → worker → lead is refused so.
    with pytest.raises(anthropic.BadRequestError, match=r"multiagent.agents\[0\]: .*has multiagent itself"):
        sdk.beta.agents.update(worker.id, version=1, multiagent={"type": "coordinator", "agents": [lead.id]})
    with pytest.raises(anthropic.BadRequestError, match=r"multiagent.agents\[1\]: .*twice"):
        _agent(
            sdk, "dup", multiagent={"type": "coordinator", "agents": [worker.id, {"type": "agent", "id": worker.id}]}
        )
    with pytest.raises(anthropic.BadRequestError, match=r"multiagent.agents\[0\]: .*version"):
        _agent(
            sdk, "v", multiagent={"type": "coordinator", "agents": [{"type": "agent", "id": worker.id, "version": 9}]}
        )
    archived = _agent(sdk, "gone")
    sdk.beta.agents.archive(archived.id)
    with pytest.raises(anthropic.BadRequestError, match=r"multiagent.agents\[0\]: .*archived"):
        _agent(sdk, "a", multiagent={"type": "coordinator", "agents": [archived.id]})


def test_sessions_run_rosters_with_client_tools_and_on_self_hosted(sdk):
    # A subagent with always_ask permissions (or custom tools) is served now: its calls reach the
    # client through the session (tests/sessions/test_multiagent_client.py).
    asker = sdk.beta.agents.create(
        name="asker",
        model=MODEL,
        tools=[
            {
                "type": "agent_toolset_20260401",
                "default_config": {"permission_policy": {"type": "always_ask"}},
                # (always_ask cannot hold for the web tools, which run upstream: test_budget_and_caching)
                "configs": [{"name": "web_fetch", "enabled": False}, {"name": "web_search", "enabled": False}],
            }
        ],
    )
    lead = _agent(sdk, "lead", multiagent={"type": "coordinator", "agents": [asker.id]})
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    (entry,) = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id).agent.multiagent.agents
    assert entry.tools[0].default_config.permission_policy.type == "always_ask"
    plain = _agent(sdk, "plain")
    lead2 = _agent(sdk, "lead2", multiagent={"type": "coordinator", "agents": [plain.id]})
    # A self_hosted environment is served too: the worker runs every thread's tools
    # (tests/sessions/test_work_worker.py).
    hosted = sdk.beta.environments.create(name="h", config={"type": "self_hosted"})
    assert sdk.beta.sessions.create(agent=lead2.id, environment_id=hosted.id).agent.multiagent.agents[0].id == plain.id
    # The roster pins version 1: a later version of the agent with multiagent changes nothing.
    sdk.beta.agents.update(plain.id, version=1, multiagent={"type": "coordinator", "agents": [{"type": "self"}]})
    lead3 = sdk.beta.agents.retrieve(lead2.id)
    assert lead3.multiagent.agents[0].version == 1  # pinned before the change
    assert sdk.beta.sessions.create(agent=lead2.id, environment_id=env.id).agent.multiagent.agents[0].version == 1


def test_the_workflows_roster_resolves_apart_from_the_subagents(sdk):
    # The defaults enable workflows (inline agents, no predefined ones).
    default = _agent(sdk, "default", multiagent={"type": "multiagent_20261001"})
    assert default.multiagent.workflows.type == "enabled"
    assert default.multiagent.workflows.inline_agents.type == "enabled"
    assert default.multiagent.workflows.predefined_agents == []
    # An agent may be in both lists (one is not added to the other), and `self` once in each.
    worker = _agent(sdk, "worker", system="work")
    both = {"type": "enabled", "predefined_agents": [worker.id, {"type": "self"}]}
    lead = _agent(sdk, "lead", multiagent={"type": "multiagent_20261001", "subagents": both, "workflows": both})
    assert [(r.id, r.version) for r in lead.multiagent.workflows.predefined_agents] == [(worker.id, 1), (lead.id, 1)]
    assert [r.id for r in lead.multiagent.subagents.predefined_agents] == [worker.id, lead.id]
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    workflows = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id).agent.multiagent.workflows
    assert [(a.type, a.name, a.system) for a in workflows.predefined_agents] == [
        ("agent", "worker", "work"),
        ("agent", "lead", None),
    ]
