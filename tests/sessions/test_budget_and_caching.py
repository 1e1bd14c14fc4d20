"""What the model call costs and carries (issue 24): budgets with list cost (budget_reached with
no further request, model_not_budgetable, budget_not_raised, budget_create_only), usage with
list_cost and cache_creation, session.usage events (strictly validated by the SDK), prompt-cache
breakpoints on every call of a tool turn, and the model options forwarded."""

import anthropic
import pytest

from processors.caching import prefix_share
from tests.scripted_model import message, text
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

MODEL = "claude-sonnet-4-5"  # $3 / $15 per MTok; 5m cache writes $3.75, reads $0.30
USD_CAP = {"type": "limit", "max_list_cost": {"amount": "2", "currency": "USD"}}  # two cents


def user(text_value: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": text_value}]}


def bash_call(usage: dict) -> dict:
    return message(
        [{"type": "tool_use", "id": "toolu_x", "name": "bash", "input": {"command": "echo hi"}}],
        "tool_use",
        usage=usage,
    )


@pytest.fixture
def env(sdk):
    return sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})


@pytest.fixture
def agent(sdk):
    return sdk.beta.agents.create(
        name="worker",
        model={"id": MODEL, "effort": "high", "inference_geo": "us"},
        system="Be brief.",
        tools=[{"type": "agent_toolset_20260401"}],
    )


def idle_events(sdk, session_id):
    return [e for e in sdk.beta.sessions.events.list(session_id) if e.type == "session.status_idle"]


@pytest.mark.docker
def test_budget_reached_stops_before_the_next_request(sdk, model, celery_worker, env, agent):
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, budget=USD_CAP)
    assert session.budget.max_list_cost.amount == "2" and session.budget.type == "limit"
    # 1,000 input + 1,000 output tokens: 3,000 + 15,000 nano-USD per token-million... = $0.018;
    # with 4,000 cache-creation tokens ($0.015) the first call costs $0.033, over the 2-cent cap.
    usage = {"input_tokens": 1000, "output_tokens": 1000, "cache_creation_input_tokens": 4000,
             "cache_read_input_tokens": 0}  # fmt: skip
    model.script([bash_call(usage), text("never requested")])
    sdk.beta.sessions.events.send(session.id, events=[user("go")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=60)

    assert len(model.requests) == 1  # the cap stopped the turn before a second request
    (idle,) = idle_events(sdk, session.id)
    assert idle.stop_reason.type == "budget_reached"
    retrieved = sdk.beta.sessions.retrieve(session.id)
    assert retrieved.usage.list_cost.amount == "4" and retrieved.usage.list_cost.currency == "USD"  # 3.3 c, up
    assert retrieved.usage.cache_creation.ephemeral_5m_input_tokens == 4000
    assert retrieved.usage.input_tokens == 1000 and retrieved.usage.output_tokens == 1000
    usages = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.usage"]
    assert len(usages) == 1 and usages[0].usage.list_cost.amount == "4"
    assert usages[0].budget.max_list_cost.amount == "2"

    # Raise-only while at the cap: lowering to or below what was spent is refused.
    with pytest.raises(anthropic.BadRequestError) as lowered:
        sdk.beta.sessions.update(
            session.id, budget={"type": "limit", "max_list_cost": {"amount": "3", "currency": "USD"}}
        )
    assert lowered.value.body["error"]["details"]["error_code"] == "budget_not_raised"
    raised = sdk.beta.sessions.update(
        session.id, budget={"type": "limit", "max_list_cost": {"amount": "500", "currency": "USD"}}
    )
    assert raised.budget.max_list_cost.amount == "500"
    removed = sdk.beta.sessions.update(session.id, budget=None)
    assert removed.budget is None
    with pytest.raises(anthropic.BadRequestError) as readded:
        sdk.beta.sessions.update(session.id, budget=USD_CAP)
    assert readded.value.body["error"]["details"]["error_code"] == "budget_create_only"


def test_budgets_need_a_priced_model_and_a_budget_at_create(sdk, env, agent):
    unpriced = sdk.beta.agents.create(name="x", model="claude-fable-5-2")
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.create(agent=unpriced.id, environment_id=env.id, budget=USD_CAP)
    assert refused.value.body["error"]["details"]["error_code"] == "model_not_budgetable"
    uncapped = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert uncapped.budget is None
    with pytest.raises(anthropic.BadRequestError) as added:
        sdk.beta.sessions.update(uncapped.id, budget=USD_CAP)
    assert added.value.body["error"]["details"]["error_code"] == "budget_create_only"
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            budget={"type": "limit", "max_list_cost": {"amount": "1.5", "currency": "USD"}},
        )


@pytest.mark.docker
def test_every_call_of_a_tool_turn_carries_cache_breakpoints_and_the_model_options(
    sdk, model, celery_worker, env, agent
):
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    steps = 5
    usage = {"input_tokens": 100, "output_tokens": 10}
    model.script([*(bash_call(usage) for _ in range(steps)), text("done")])
    sdk.beta.sessions.events.send(session.id, events=[user("work")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=90)
    assert len(model.requests) == steps + 1
    for number, request in enumerate(model.requests):
        body = request["body"]
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1] == {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        marked = [b for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("cache_control")]
        assert 1 <= len(marked) <= 2 and len(marked) + 2 <= 4
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["output_config"] == {"effort": "high"} and body["inference_geo"] == "us"
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}  # a Claude 4 model: budgeted
        if number:
            assert prefix_share(body) >= 0.9
    final = sdk.beta.sessions.retrieve(session.id)
    assert final.usage.input_tokens == 100 * steps + 10 and final.usage.list_cost is not None


def test_a_system_message_is_a_system_turn_after_what_it_accompanies(sdk, model, celery_worker, env, agent):
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with pytest.raises(anthropic.BadRequestError, match="must be the last event"):
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "system.message", "content": [{"type": "text", "text": "Be terse."}]}]
        )
    model.script([text("ok")])
    sdk.beta.sessions.events.send(
        session.id,
        events=[user("hello"), {"type": "system.message", "content": [{"type": "text", "text": "Answer in French."}]}],
    )
    wait_for(lambda: idle_events(sdk, session.id), timeout=30)
    messages = model.requests[0]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "system"]
    assert messages[0]["content"][0]["text"] == "hello"
    assert messages[1]["content"][0]["text"] == "Answer in French."
    assert model.requests[0]["body"]["system"][0]["text"] == "Be brief."  # the top-level prompt is kept


def test_fields_this_server_cannot_act_on_are_refused_not_dropped(sdk, env, agent):
    """No silent drop: a deployment filter (no deployments here) matches nothing. MCP servers
    are acted on (tests/sessions/test_mcp.py): a session takes them, overrides included."""
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert [s.id for s in sdk.beta.sessions.list()] == [session.id]
    assert list(sdk.beta.sessions.list(deployment_id="depl_unknown")) == []
    with_mcp = sdk.beta.agents.create(
        name="m",
        model=MODEL,
        mcp_servers=[{"type": "url", "name": "docs", "url": "https://mcp.example.com/mcp"}],
        tools=[{"type": "mcp_toolset", "mcp_server_name": "docs"}],
    )
    made = sdk.beta.sessions.create(agent=with_mcp.id, environment_id=env.id)
    assert [server.name for server in made.agent.mcp_servers] == ["docs"]
    overridden = sdk.beta.sessions.create(
        agent={
            "type": "agent_with_overrides",
            "id": with_mcp.id,
            "mcp_servers": [{"type": "url", "name": "docs", "url": "https://other.example.com/mcp"}],
        },
        environment_id=env.id,
    )
    assert overridden.agent.mcp_servers[0].url == "https://other.example.com/mcp"
    moved = [{"type": "url", "name": "docs", "url": "https://moved.example.com/mcp"}]
    assert sdk.beta.sessions.update(made.id, agent={"mcp_servers": moved}).agent.mcp_servers[0].url == moved[0]["url"]
    with pytest.raises(anthropic.BadRequestError, match="not in the agent's mcp_servers"):
        sdk.beta.sessions.update(made.id, agent={"mcp_servers": []})
    with pytest.raises(anthropic.BadRequestError, match="not in the agent's mcp_servers"):
        sdk.beta.sessions.create(
            agent={"type": "agent_with_overrides", "id": with_mcp.id, "mcp_servers": []}, environment_id=env.id
        )
    # Issue 42: an MCP server no toolset references is refused (the SDK: rejected), on create,
    # on an update that leaves it alone, and in a session's overrides; nothing is stored.
    idle = [{"type": "url", "name": "idle", "url": "https://idle.example.com/mcp"}]
    with pytest.raises(anthropic.BadRequestError, match=r"mcp_servers: \['idle'\] referenced by no mcp_toolset"):
        sdk.beta.agents.create(name="n", model=MODEL, mcp_servers=idle)
    with pytest.raises(anthropic.BadRequestError, match=r"mcp_servers: \['idle'\] referenced by no mcp_toolset"):
        sdk.beta.agents.update(with_mcp.id, version=1, mcp_servers=[*moved, *idle])
    with pytest.raises(anthropic.BadRequestError, match=r"mcp_servers: \['docs'\] referenced by no mcp_toolset"):
        sdk.beta.agents.update(with_mcp.id, version=1, tools=[])
    assert sdk.beta.agents.retrieve(with_mcp.id).version == 1
    with pytest.raises(anthropic.BadRequestError, match=r"agent.mcp_servers: \['idle'\] referenced by no"):
        sdk.beta.sessions.update(made.id, agent={"mcp_servers": [*moved, *idle]})
    # execution_identity.aws_role: nothing here assumes a role, so it is refused, not stored.
    with pytest.raises(anthropic.BadRequestError, match="aws_role cannot be acted on"):
        sdk.beta.agents.create(
            name="r",
            model=MODEL,
            execution_identity={"type": "aws_role", "role_arn": "arn:aws:iam::123456789012:role/agent"},
        )
    plain = sdk.beta.agents.create(name="s", model=MODEL, execution_identity={"type": "service_account"})
    assert plain.execution_identity.type == "service_account"
    # The web tools' domain lists, as the SDK documents them: at most 64, non-empty, not both.
    for config, fragment in (
        ({"allowed_domains": [f"d{i}.example.com" for i in range(65)]}, "allowed_domains"),
        ({"blocked_domains": []}, "must not be empty"),
        ({"allowed_domains": ["a.example.com"], "blocked_domains": ["b.example.com"]}, "cannot be given with"),
    ):
        with pytest.raises(anthropic.BadRequestError, match=fragment):
            sdk.beta.agents.create(
                name="w",
                model=MODEL,
                tools=[{"type": "agent_toolset_20260401", "configs": [{"name": "web_fetch", **config}]}],
            )
    ok = [{"type": "agent_toolset_20260401", "configs": [{"name": "web_fetch", "allowed_domains": ["a.example.com"]}]}]
    assert sdk.beta.agents.create(name="w", model=MODEL, tools=ok).tools
    # always_ask on a web tool cannot be honoured (it runs inside the upstream's model call): a
    # 400 naming where the policy came from, never a fetch that nobody confirmed.
    ask = {"type": "always_ask"}
    for toolset, field in (
        ({"configs": [{"name": "web_search", "permission_policy": ask}]}, "tools[0].configs[0].permission_policy"),
        ({"default_config": {"permission_policy": ask}}, "tools[0].default_config.permission_policy"),
    ):
        with pytest.raises(anthropic.BadRequestError, match="always_ask cannot be honoured for web_") as refused:
            sdk.beta.agents.create(name="w", model=MODEL, tools=[{"type": "agent_toolset_20260401", **toolset}])
        assert field in refused.value.message, refused.value.message
    # Asking for the other tools, the web tools allowed or off: accepted.
    allowed = {"type": "always_allow"}
    asking = {
        "type": "agent_toolset_20260401",
        "default_config": {"permission_policy": ask},
        "configs": [{"name": "web_fetch", "permission_policy": allowed}, {"name": "web_search", "enabled": False}],
    }
    configs = {c.name: c for c in sdk.beta.agents.create(name="w", model=MODEL, tools=[asking]).tools[0].configs}
    assert configs["bash"].permission_policy.type == "always_ask"
    assert configs["web_fetch"].permission_policy.type == "always_allow" and not configs["web_search"].enabled


SEARCH_REPLY = message(
    [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "mango"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://docs.example.com/mango",
                    "title": "Mango docs",
                    "encrypted_content": "Eo8B",
                    "page_age": None,
                },
            ],
        },
        {"type": "text", "text": "Mango is a fruit."},
    ],
    usage={"input_tokens": 50, "output_tokens": 20, "server_tool_use": {"web_search_requests": 1}},
)


def test_web_tools_are_the_upstreams_server_tools(sdk, model, celery_worker, env, settings):
    agent = sdk.beta.agents.create(
        name="searcher",
        model=MODEL,
        tools=[
            {
                "type": "agent_toolset_20260401",
                "configs": [
                    {"name": "web_search", "allowed_domains": ["docs.example.com"],
                     "user_location": {"type": "approximate", "country": "FR"}},
                    {"name": "web_fetch", "max_content_tokens": 5000},
                ],
            }
        ],
    )  # fmt: skip
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    model.script([SEARCH_REPLY, text("Still a fruit.")])
    sdk.beta.sessions.events.send(session.id, events=[user("What is mango?")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=30)
    body = model.requests[0]["body"]
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert tools["web_search"]["type"] == "web_search_20250305"
    assert tools["web_search"]["allowed_domains"] == ["docs.example.com"]
    assert tools["web_search"]["user_location"] == {"type": "approximate", "country": "FR"}
    assert tools["web_fetch"]["type"] == "web_fetch_20250910" and tools["web_fetch"]["max_content_tokens"] == 5000
    assert "web-fetch-2025-09-10" in model.requests[0]["headers"].get("anthropic-beta", "")

    events = list(sdk.beta.sessions.events.list(session.id))
    use = next(e for e in events if e.type == "agent.tool_use")
    result = next(e for e in events if e.type == "agent.tool_result")
    assert use.name == "web_search" and use.input == {"query": "mango"}
    assert result.tool_use_id == use.id and "https://docs.example.com/mango" in result.content[0].text
    assert sdk.beta.sessions.retrieve(session.id).usage.server_tool_use.web_search_requests == 1

    # The next turn replays the server blocks as they came, in the assistant's turn.
    sdk.beta.sessions.events.send(session.id, events=[user("Sure?")])
    wait_for(lambda: len(idle_events(sdk, session.id)) == 2, timeout=30)
    assistant = model.requests[1]["body"]["messages"][1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == ["server_tool_use", "web_search_tool_result", "text"]

    # An upstream without server tools: they are not offered at all.
    settings.MANGO_MODEL_SERVER_WEB_TOOLS = False
    from sessions.runtime.tools import session_tools

    definitions, _specs = session_tools(sdk.beta.sessions.retrieve(session.id).agent.model_dump(mode="json"))
    assert not {"web_search", "web_fetch"} & {d["name"] for d in definitions}
    with pytest.raises(anthropic.BadRequestError, match="url_sources"):
        sdk.beta.agents.create(
            name="x",
            model=MODEL,
            tools=[
                {"type": "agent_toolset_20260401", "configs": [{"name": "web_fetch", "url_sources": {"type": "all"}}]}
            ],
        )


@pytest.mark.docker
def test_a_conversation_past_the_threshold_is_compacted_and_the_turn_completes(
    sdk, model, celery_worker, env, agent, settings
):
    big = {"input_tokens": 1000, "output_tokens": 10, "cache_read_input_tokens": 200_000}
    model.script([bash_call(big), text("SUMMARY: ran echo hi, it printed hi."), text("All done.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    sdk.beta.sessions.events.send(session.id, events=[user("do the big thing")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=60)
    _first, summarizing, after = (r["body"] for r in model.requests)
    assert summarizing["tool_choice"] == {"type": "none"}
    assert "compacted" in summarizing["messages"][-1]["content"][-1]["text"]
    assert len(str(after["messages"])) < len(str(summarizing["messages"]))
    assert "SUMMARY: ran echo hi" in str(after["messages"][0]) and "do the big thing" not in str(after["messages"])
    events = list(sdk.beta.sessions.events.list(session.id))
    types = [e.type for e in events]
    assert "agent.thread_context_compacted" in types
    assert "agent.tool_use" in types and types[-1] == "session.status_idle"  # the full public log is kept
    assert [e for e in events if e.type == "agent.message"][-1].content[0].text == "All done."
    assert idle_events(sdk, session.id)[-1].stop_reason.type == "end_turn"


@pytest.mark.docker
def test_a_turn_after_one_that_ended_past_the_threshold_starts_with_a_compaction(sdk, model, celery_worker, env, agent):
    """No tool use in either turn: the first turn's one call ends it past the threshold, and the
    next turn's first call is the compaction (issue 42: it used to be sent whole)."""
    big = {"input_tokens": 1000, "output_tokens": 10, "cache_read_input_tokens": 200_000}
    model.script(
        [
            message([{"type": "text", "text": "A long answer."}], usage=big),
            text("SUMMARY: the user asked for a long answer and got it."),
            text("Short answer."),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    sdk.beta.sessions.events.send(session.id, events=[user("the long question")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=60)
    assert len(model.requests) == 1  # the first turn is not compacted after its last call
    sdk.beta.sessions.events.send(session.id, events=[user("and now?")])
    wait_for(lambda: len(idle_events(sdk, session.id)) == 2, timeout=60)
    _first, summarizing, after = (r["body"] for r in model.requests)
    assert summarizing["tool_choice"] == {"type": "none"}
    assert "the long question" in str(summarizing["messages"]) and "and now?" in str(summarizing["messages"])
    assert "SUMMARY: the user asked" in str(after["messages"][0]) and "the long question" not in str(after["messages"])
    types = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    second_turn = types[types.index("session.status_idle") + 1 :]
    assert second_turn.index("agent.thread_context_compacted") < second_turn.index("agent.message")
    assert [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.message"][-1].content[
        0
    ].text == "Short answer."
    # The turn after the compacted one starts from a small conversation: no compaction again.
    model.add(text("Third."))
    sdk.beta.sessions.events.send(session.id, events=[user("third")])
    wait_for(lambda: len(idle_events(sdk, session.id)) == 3, timeout=60)
    assert len(model.requests) == 4 and model.requests[3]["body"].get("tool_choice") != {"type": "none"}


@pytest.mark.docker
def test_compaction_that_cannot_shrink_is_compaction_limit_reached(sdk, model, celery_worker, env, agent):
    big = {"input_tokens": 1000, "output_tokens": 10, "cache_read_input_tokens": 200_000}
    model.script([bash_call(big), text("SUMMARY"), bash_call(big), text("never")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    sdk.beta.sessions.events.send(session.id, events=[user("go")])
    wait_for(lambda: idle_events(sdk, session.id), timeout=60)
    errors = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
    assert errors[-1].error.type == "compaction_limit_reached_error"
    assert len(model.requests) == 3


@pytest.mark.docker
def test_thinking_is_an_event_and_goes_back_to_the_model_in_the_tool_loop(sdk, model, celery_worker, env, agent):
    thinking = {"type": "thinking", "thinking": "I should list files.", "signature": "sig-abc"}
    model.script(
        [
            message(
                [thinking, {"type": "tool_use", "id": "toolu_t", "name": "bash", "input": {"command": "ls"}}],
                "tool_use",
            ),
            text("Listed."),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with sdk.beta.sessions.events.stream(session.id, event_deltas=["agent.thinking"]) as stream:
        sdk.beta.sessions.events.send(session.id, events=[user("list")])
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                break
    stored = next(e for e in seen if e.type == "agent.thinking")
    start = next(e for e in seen if e.type == "event_start")
    assert start.event.type == "agent.thinking" and start.event.id == stored.id  # the preview names the event
    types = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    assert types.index("agent.thinking") < types.index("agent.tool_use")
    assistant = model.requests[1]["body"]["messages"][1]
    assert assistant["content"][0] == thinking and assistant["content"][1]["type"] == "tool_use"


def test_a_stored_agent_asking_for_a_web_tool_never_offers_it(settings):
    """An agent stored before always_ask on a web tool was refused: the tool is not offered to
    the model (the upstream would run it inside its call, unconfirmed); the others are."""
    from sessions.runtime.tools import session_tools

    settings.MANGO_MODEL_SERVER_WEB_TOOLS = True
    ask, allow = {"type": "always_ask"}, {"type": "always_allow"}
    configs = [
        {"name": "web_fetch", "enabled": True, "permission_policy": ask},
        {"name": "web_search", "enabled": True, "permission_policy": allow},
        {"name": "bash", "enabled": True, "permission_policy": ask},
    ]
    definitions, specs = session_tools({"tools": [{"type": "agent_toolset_20260401", "configs": configs}]})
    assert [d["name"] for d in definitions] == ["web_search", "bash"]
    assert specs["bash"].permission == "always_ask" and "web_fetch" not in specs


def test_thinking_is_adaptive_where_the_model_takes_it_budgeted_before_and_off_when_told(settings):
    from sessions.runtime.model import thinking_config

    assert thinking_config("claude-opus-4-6") == {"type": "adaptive"}
    assert thinking_config("claude-sonnet-5-5") == {"type": "adaptive"}
    assert thinking_config("claude-sonnet-4-5-20250929") == {"type": "enabled", "budget_tokens": 4096}
    assert thinking_config("claude-3-5-haiku-latest") is None and thinking_config("my-local-model") is None
    settings.MANGO_MODEL_THINKING = "enabled"
    assert thinking_config("claude-opus-4-6") == {"type": "enabled", "budget_tokens": 4096}
    settings.MANGO_MODEL_MAX_TOKENS = 2000  # the budget stays below max_tokens
    assert thinking_config("claude-opus-4-6") == {"type": "enabled", "budget_tokens": 1999}
    settings.MANGO_MODEL_MAX_TOKENS = 1000  # no room for the least budget: none
    assert thinking_config("claude-opus-4-6") is None
    settings.MANGO_MODEL_THINKING = "off"
    assert thinking_config("claude-opus-5") is None
