"""The sessions runtime end to end: the official SDK against the live server, a real Celery
worker, a real dockerd, and the scripted model upstream."""

import time

import pytest

from sessions.models import Session
from tests.scripted_model import error, message, text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(120)]

MODEL = "claude-sonnet-4-5"


@pytest.fixture
def env_cloud(sdk):
    return sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})


@pytest.fixture
def agent_bash(sdk):
    return sdk.beta.agents.create(
        name="runner", model=MODEL, system="Be brief.", tools=[{"type": "agent_toolset_20260401"}]
    )


def _user(text_value: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": text_value}]}


def _collect_until_idle(stream, timeout: float = 30.0) -> list:
    seen, deadline = [], time.monotonic() + timeout
    for event in stream:
        seen.append(event)
        if event.type == "session.status_idle":
            return seen
        assert time.monotonic() < deadline, [e.type for e in seen]
    raise AssertionError(f"stream ended before idle: {[e.type for e in seen]}")


def _events(sdk, session_id: str, **params) -> list:
    return list(sdk.beta.sessions.events.list(session_id, **params))


def _wait_idle(sdk, session_id: str, timeout: float = 20.0):
    def idle():
        events = _events(sdk, session_id)
        return events if events and events[-1].type == "session.status_idle" else None

    return wait_for(idle, timeout)


def _containers(docker_client, session_id: str) -> list:
    return docker_client.containers.list(
        all=True, filters={"label": f"mango.session={session_id}"}, ignore_removed=True
    )


def test_bash_turn_streamed_over_sse(sdk, api_key, model, celery_worker, env_cloud, agent_bash, docker_client):
    model.script(
        [tool_use("bash", {"command": "echo hello from $(uname -s); echo oops >&2; exit 3"}), text("All done.")]
    )
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id, title="bash")
    assert session.status == "idle"

    with sdk.beta.sessions.events.stream(session.id) as stream:
        sent = sdk.beta.sessions.events.send(session.id, events=[_user("run it")])
        assert sent.data[0].type == "user.message"
        assert sent.data[0].processed_at is None
        seen = _collect_until_idle(stream)

    types = [e.type for e in seen]
    assert types[0] == "user.message"
    assert types[1:] == [
        "session.status_running",
        "span.model_request_start",
        "span.model_request_end",
        "session.usage",
        "agent.tool_use",
        "agent.tool_result",
        "span.model_request_start",
        "span.model_request_end",
        "session.usage",
        "agent.message",
        "session.status_idle",
    ]
    tool_use_event = seen[5]
    assert tool_use_event.name == "bash"
    assert tool_use_event.evaluated_permission == "allow"
    result = seen[6]
    assert result.tool_use_id == tool_use_event.id
    output = result.content[0].text
    assert "hello from Linux" in output and "oops" in output and "[exit status: 3]" in output
    assert seen[-1].stop_reason.type == "end_turn"
    assert seen[-2].content[0].text == "All done."
    assert seen[3].model_usage.input_tokens == 10

    # The model saw the tool definitions and, on the second call, the tool result.
    first, second = model.requests[0]["body"], model.requests[1]["body"]
    assert first["model"] == MODEL
    assert first["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert {"bash", "read", "write", "edit", "glob", "grep"} <= {t["name"] for t in first["tools"]}
    bash_tool = next(t for t in first["tools"] if t["name"] == "bash")
    # command or restart (the SDK's bash tool): neither is required on its own
    assert set(bash_tool["input_schema"]["properties"]) == {"command", "restart", "timeout_ms"}
    assert "required" not in bash_tool["input_schema"]
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "run it", "cache_control": {"type": "ephemeral"}}]}
    ]
    assert second["messages"][1]["content"][0]["type"] == "tool_use"
    tool_result = second["messages"][2]["content"][0]
    assert (
        tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == second["messages"][1]["content"][0]["id"]
    )

    # The events list matches, oldest first, and filters by type.
    listed = _events(sdk, session.id)
    assert [e.id for e in listed] == [e.id for e in seen]
    assert listed[0].processed_at is not None
    only = _events(sdk, session.id, types=["agent.tool_use", "agent.message"])
    assert [e.type for e in only] == ["agent.tool_use", "agent.message"]

    # One container, labelled, limited, without network, outputs mounted.
    containers = _containers(docker_client, session.id)
    assert len(containers) == 1
    container = containers[0]
    assert container.labels["mango.workspace"] == api_key.workspace.id
    assert container.labels["mango.session"] == session.id
    assert container.labels["mango.outputs_mount_version"] == "1"
    host_config = container.attrs["HostConfig"]
    assert host_config["NetworkMode"] == "none"
    assert host_config["PidsLimit"] and host_config["Memory"] and host_config["NanoCpus"]
    assert any(m["Destination"] == "/mnt/session/outputs" for m in container.attrs["Mounts"])
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"

    # Delete: the stream ends with session.deleted, the container goes, the session is gone.
    with sdk.beta.sessions.events.stream(session.id) as stream:
        deleted = sdk.beta.sessions.delete(session.id)
        assert deleted.type == "session_deleted"
        tail = [e.type for e in stream]
    assert tail == ["session.deleted"]
    wait_for(lambda: _containers(docker_client, session.id) == [], 30)  # a worker removes it
    with pytest.raises(Exception) as excinfo:
        sdk.beta.sessions.retrieve(session.id)
    assert getattr(excinfo.value, "status_code", None) == 404


def test_file_tools_in_the_sandbox(sdk, model, celery_worker, env_cloud, agent_bash):
    model.script(
        [
            tool_use("write", {"file_path": "/workspace/notes/a.txt", "content": "alpha\nbeta\ngamma\n"}),
            tool_use("edit", {"file_path": "/workspace/notes/a.txt", "old_string": "beta", "new_string": "BETA"}),
            tool_use("read", {"file_path": "/workspace/notes/a.txt"}),
            tool_use("grep", {"pattern": "gam+a", "path": "/workspace"}),
            tool_use("glob", {"pattern": "**/*.txt"}),
            tool_use("web_search", {"query": "x"}),
            text("ok"),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("files")])
    events = _wait_idle(sdk, session.id)
    results = [e for e in events if e.type == "agent.tool_result"]
    texts = [r.content[0].text for r in results]
    assert texts[0].startswith("Wrote 17 bytes")
    assert "Replaced 1" in texts[1]
    assert "BETA" in texts[2] and "     2\tBETA" in texts[2]
    assert "a.txt:3:gamma" in texts[3]
    assert "/workspace/notes/a.txt" in texts[4]
    # web_search is the upstream's server tool: a client tool_use naming it is refused.
    assert results[5].is_error and "Unknown tool 'web_search'" in texts[5]
    assert not any(r.is_error for r in results[:5])


def test_text_only_session_creates_no_container(sdk, model, celery_worker, env_cloud, agent_bash, docker_client):
    model.script([text("Just words.")])
    session = sdk.beta.sessions.create(
        agent=agent_bash.id, environment_id=env_cloud.id, initial_events=[_user("hello")]
    )
    events = _wait_idle(sdk, session.id)
    assert [e.type for e in events if e.type.startswith("agent.")] == ["agent.message"]
    assert _containers(docker_client, session.id) == []
    assert Session.objects.get(id=session.id).sandbox_state == "none"


def test_interrupt_stops_a_long_command_within_two_seconds(sdk, model, celery_worker, env_cloud, agent_bash):
    model.script([tool_use("bash", {"command": "sleep 60; echo never"}), text("should not be called")])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("sleep")])
        for event in stream:
            if event.type == "agent.tool_use":
                break
        time.sleep(0.5)  # the command is running in the container
        started = time.monotonic()
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        rest = _collect_until_idle(stream, timeout=10)
        elapsed = time.monotonic() - started
    print(f"\ninterrupt during a command -> idle on the stream: {elapsed:.3f}s")
    assert elapsed < 2.0, elapsed
    assert rest[-1].stop_reason.type == "end_turn"
    result = next(e for e in rest if e.type == "agent.tool_result")
    assert result.is_error and "interrupted" in result.content[0].text
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"
    assert len(model.requests) == 1
    interrupt = next(e for e in _events(sdk, session.id) if e.type == "user.interrupt")
    assert interrupt.processed_at is not None

    # The session works again afterwards; the interrupted call is in the history.
    model.script([text("back")])
    sdk.beta.sessions.events.send(session.id, events=[_user("again")])
    events = _wait_idle(sdk, session.id)
    assert events[-2].type == "agent.message" and events[-2].content[0].text == "back"
    history = model.requests[0]["body"]["messages"]
    # The rolling cache breakpoint sits on the newest block (processors/caching.py).
    assert history[-1]["content"][-1] == {"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(500, "model_request_failed_error"), (529, "model_overloaded_error"), (429, "model_rate_limited_error")],
)
def test_upstream_failure_becomes_session_error_then_idle(
    sdk, model, celery_worker, env_cloud, agent_bash, status, error_type
):
    # MANGO_MODEL_MAX_RETRIES=1 in the test worker: one retry, then exhausted.
    model.script([error(status), error(status)])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
        seen = _collect_until_idle(stream)
    errors = [e for e in seen if e.type == "session.error"]
    assert [e.error.type for e in errors] == [error_type, error_type]
    assert [e.error.retry_status.type for e in errors] == ["retrying", "exhausted"]
    assert "session.status_rescheduled" in [e.type for e in seen]
    assert seen[-1].stop_reason.type == "retries_exhausted"
    ends = [e for e in seen if e.type == "span.model_request_end"]
    assert all(e.is_error for e in ends)
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"

    # Not stuck: the next message runs normally.
    model.script([text("recovered")])
    sdk.beta.sessions.events.send(session.id, events=[_user("again")])
    events = _wait_idle(sdk, session.id)
    assert events[-2].content[0].text == "recovered"


def test_custom_tool_round_trip(sdk, model, celery_worker, env_cloud):
    agent = sdk.beta.agents.create(
        name="custom",
        model=MODEL,
        tools=[
            {
                "type": "custom",
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
    )
    model.script([tool_use("get_weather", {"city": "Paris"}, text_before="Checking."), text("It is sunny in Paris.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("weather?")])
        first = _collect_until_idle(stream)
        custom = next(e for e in first if e.type == "agent.custom_tool_use")
        assert custom.name == "get_weather" and custom.input == {"city": "Paris"}
        assert first[-1].stop_reason.type == "requires_action"
        assert first[-1].stop_reason.event_ids == [custom.id]
        sdk.beta.sessions.events.send(
            session.id,
            events=[
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": custom.id,
                    "content": [{"type": "text", "text": "sunny"}],
                }
            ],
        )
        second = _collect_until_idle(stream)
    assert second[-1].stop_reason.type == "end_turn"
    assert [e for e in second if e.type == "agent.message"][-1].content[0].text == "It is sunny in Paris."
    body = model.requests[1]["body"]
    assert body["messages"][-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": custom.id,
        "content": [{"type": "text", "text": "sunny"}],
        "cache_control": {"type": "ephemeral"},
    }
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "cache_control": {"type": "ephemeral"},
        }
    ]


def test_self_hosted_environment_hands_builtin_tools_to_the_client(
    sdk, model, celery_worker, agent_bash, docker_client
):
    environment = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    model.script([tool_use("bash", {"command": "ls"}), text("thanks")])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=environment.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("list")])
    events = _wait_idle(sdk, session.id)
    tool = next(e for e in events if e.type == "agent.tool_use")
    assert events[-1].stop_reason.type == "requires_action" and events[-1].stop_reason.event_ids == [tool.id]
    sdk.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.tool_result", "tool_use_id": tool.id, "content": [{"type": "text", "text": "a b"}]}],
    )
    wait_for(lambda: _events(sdk, session.id)[-1].type == "session.status_idle" and len(model.requests) == 2)
    assert _events(sdk, session.id)[-1].stop_reason.type == "end_turn"
    assert _containers(docker_client, session.id) == []


def test_self_hosted_always_ask_makes_one_model_call_after_the_clients_result(sdk, model, celery_worker, docker_client):
    """A confirmed built-in tool on self_hosted is the client's to run: no sandbox of ours, and
    the confirmation followed by the client's tool result makes exactly one model call."""
    agent = sdk.beta.agents.create(
        name="careful",
        model=MODEL,
        tools=[
            {
                "type": "agent_toolset_20260401",
                "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
            }
        ],
    )
    environment = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    model.script([tool_use("bash", {"command": "ls"}), text("Listed."), text("spurious")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("list")])
    ask = next(e for e in _wait_idle(sdk, session.id) if e.type == "agent.tool_use")
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.tool_confirmation", "tool_use_id": ask.id, "result": "allow"}]
    )
    time.sleep(1.5)  # a turn the confirmation alone started would call the model now
    assert len(model.requests) == 1
    sdk.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.tool_result", "tool_use_id": ask.id, "content": [{"type": "text", "text": "a b"}]}],
    )
    wait_for(lambda: len(model.requests) == 2 and _events(sdk, session.id)[-1].type == "session.status_idle", 20)
    time.sleep(1.0)
    events = _events(sdk, session.id)
    assert len(model.requests) == 2
    assert [e.type for e in events].count("agent.message") == 1 and events[-1].stop_reason.type == "end_turn"
    assert not [e for e in events if e.type == "agent.tool_result"]  # nothing of ours ran it
    assert _containers(docker_client, session.id) == []


def test_always_ask_tool_waits_for_confirmation(sdk, model, celery_worker, env_cloud):
    agent = sdk.beta.agents.create(
        name="careful",
        model=MODEL,
        tools=[
            {
                "type": "agent_toolset_20260401",
                "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
            }
        ],
    )
    model.script(
        [
            tool_use("bash", {"command": "echo confirmed"}),
            text("ran it"),
            tool_use("bash", {"command": "rm -rf /"}),
            text("ok"),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("go")])
    events = _wait_idle(sdk, session.id)
    ask = next(e for e in events if e.type == "agent.tool_use")
    assert ask.evaluated_permission == "ask" and ask.evaluation.type == "always_ask"
    assert events[-1].stop_reason.type == "requires_action" and events[-1].stop_reason.event_ids == [ask.id]

    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.tool_confirmation", "tool_use_id": ask.id, "result": "allow"}]
    )
    wait_for(lambda: _events(sdk, session.id)[-1].type == "session.status_idle" and len(model.requests) == 2, 20)
    events = _events(sdk, session.id)
    result = next(e for e in events if e.type == "agent.tool_result")
    assert result.tool_use_id == ask.id and "confirmed" in result.content[0].text
    assert events[-1].stop_reason.type == "end_turn"

    sdk.beta.sessions.events.send(session.id, events=[_user("and now?")])
    wait_for(lambda: len(model.requests) == 3 and _events(sdk, session.id)[-1].type == "session.status_idle", 20)
    second_ask = [e for e in _events(sdk, session.id) if e.type == "agent.tool_use"][-1]
    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {"type": "user.tool_confirmation", "tool_use_id": second_ask.id, "result": "deny", "deny_message": "no"}
        ],
    )
    wait_for(lambda: len(model.requests) == 4 and _events(sdk, session.id)[-1].type == "session.status_idle", 20)
    denied = [e for e in _events(sdk, session.id) if e.type == "agent.tool_result"][-1]
    assert denied.is_error and denied.content[0].text == "no"


def test_interrupt_during_a_slow_model_call(sdk, model, celery_worker, env_cloud, agent_bash):
    model.script([text("too late", delay=5)])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("think")])
        for event in stream:
            if event.type == "span.model_request_start":
                break
        started = time.monotonic()
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        rest = _collect_until_idle(stream, timeout=10)
    elapsed = time.monotonic() - started
    print(f"\ninterrupt during a model call -> idle on the stream: {elapsed:.3f}s")
    assert elapsed < 2.0
    assert [e.type for e in rest if e.type.startswith("agent.")] == []
    assert rest[-1].stop_reason.type == "end_turn"


def test_archive_during_a_slow_model_call_stops_the_turn_and_terminates(
    sdk, model, celery_worker, env_cloud, agent_bash
):
    """Archive terminates a running session too: its turn is interrupted, then the session is
    `terminated` (session.status_idle, then session.status_terminated, the last event)."""
    model.script([text("too late", delay=5)])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("think")])
        for event in stream:
            if event.type == "span.model_request_start":
                break
        archived = sdk.beta.sessions.archive(session.id)
        assert archived.archived_at is not None and archived.status in ("running", "terminated")
        rest = []
        for event in stream:
            rest.append(event)
            if event.type == "session.status_terminated":
                break
    assert [e.type for e in rest if e.type.startswith("agent.")] == []
    assert [e.type for e in rest if e.type.startswith("session.status")][-2:] == [
        "session.status_idle",
        "session.status_terminated",
    ]
    assert wait_for(lambda: sdk.beta.sessions.retrieve(session.id).status == "terminated", 10)
    assert _events(sdk, session.id)[-1].type == "session.status_terminated"
    assert len(model.requests) == 1


def test_unknown_tool_gets_an_error_result_and_the_turn_continues(sdk, model, celery_worker, env_cloud, agent_bash):
    model.script([tool_use("teleport", {"to": "mars"}), text("I cannot do that.")])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("go")])
    events = _wait_idle(sdk, session.id)
    use = next(e for e in events if e.type == "agent.tool_use")
    result = next(e for e in events if e.type == "agent.tool_result")
    assert use.evaluated_permission == "deny"
    assert result.tool_use_id == use.id and result.is_error and "Unknown tool" in result.content[0].text
    assert events[-1].stop_reason.type == "end_turn" and len(model.requests) == 2


def test_delete_during_a_running_command(sdk, model, celery_worker, env_cloud, agent_bash, docker_client):
    model.script([tool_use("bash", {"command": "sleep 60"}), text("never")])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("sleep")])
        for event in stream:
            if event.type == "agent.tool_use":
                break
        wait_for(lambda: _containers(docker_client, session.id), 10)
        time.sleep(0.3)
        sdk.beta.sessions.delete(session.id)
        tail = [e.type for e in stream]
    assert tail[-1] == "session.deleted"
    wait_for(lambda: _containers(docker_client, session.id) == [], 30)  # a worker removes it

    def runner_done():
        row = Session.objects.get(id=session.id)
        return row.runner_token is None

    wait_for(runner_done, 10)
    last = Session.objects.get(id=session.id).events.order_by("-seq").first()
    assert last.type == "session.deleted"
    assert _containers(docker_client, session.id) == []
    assert len(model.requests) == 1


def test_event_deltas_preview_agent_messages(sdk, model, celery_worker, env_cloud, agent_bash):
    model.script([message([{"type": "text", "text": "Hello there"}, {"type": "text", "text": "world"}])])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id, event_deltas=["agent.message"]) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
        seen = _collect_until_idle(stream)
    types = [e.type for e in seen]
    start = next(e for e in seen if e.type == "event_start")
    deltas = [e for e in seen if e.type == "event_delta"]
    final = next(e for e in seen if e.type == "agent.message")
    assert start.event.type == "agent.message" and start.event.id == final.id
    assert types.index("event_start") < types.index("event_delta") < types.index("agent.message")
    assert all(d.event_id == final.id for d in deltas)
    rebuilt: dict[int, str] = {}
    for d in deltas:
        rebuilt[d.delta.index] = rebuilt.get(d.delta.index, "") + d.delta.content.text
    assert [rebuilt[i] for i in sorted(rebuilt)] == [b.text for b in final.content] == ["Hello there", "world"]
    # Previews are never stored; a stream without event_deltas never sees them.
    assert not [e for e in _events(sdk, session.id) if e.type.startswith("event_")]
    assert model.requests[0]["body"]["stream"] is True


def test_upstream_key_rejected_names_the_setting_and_hides_upstream_text(
    sdk, model, celery_worker, env_cloud, agent_bash
):
    leak = f"invalid x-api-key sk-test-scripted for {model.url}/v1/messages"
    model.script([error(401, "authentication_error", leak)])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
    events = _wait_idle(sdk, session.id)
    errors = [e for e in events if e.type == "session.error"]
    assert len(errors) == 1  # a rejected key is not retried
    message_text = errors[0].error.message
    # The URL it tried and the setting to check; never the upstream's own words (its text echoes the key).
    expected = f"The model upstream at {model.url} rejected the API key (HTTP 401); check ANTHROPIC_API_KEY."
    assert message_text == expected
    assert "sk-test" not in message_text and "x-api-key" not in message_text
    assert errors[0].error.retry_status.type == "exhausted"
    assert events[-1].stop_reason.type == "retries_exhausted"
    # Operators still find the upstream's words on the session row.
    assert "invalid x-api-key" in Session.objects.get(id=session.id).last_error


def test_bash_restart_is_in_the_definition_and_acted_on(sdk, model, celery_worker, env_cloud, agent_bash):
    """bash's `restart` (the SDK's bash tool has it): offered to the model; alone it answers that
    the shell restarted, with a command the command runs (in a fresh shell, as every call here)."""
    model.script(
        [
            tool_use("bash", {"command": "export KEPT=1; echo first"}),
            tool_use("bash", {"restart": True}),
            tool_use("bash", {"restart": True, "command": "echo after-${KEPT:-unset}"}),
            tool_use("bash", {}),
            text("Done."),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("go")])
    events = _wait_idle(sdk, session.id, timeout=60)
    bash = next(t for t in model.requests[0]["body"]["tools"] if t["name"] == "bash")
    assert bash["input_schema"]["properties"]["restart"]["type"] == "boolean"
    assert "command" not in bash["input_schema"].get("required", [])
    results = [e for e in events if e.type == "agent.tool_result"]
    texts = [e.content[0].text for e in results]
    assert "first" in texts[0] and not results[0].is_error
    assert texts[1] == "bash session restarted" and not results[1].is_error
    assert "after-unset" in texts[2] and not results[2].is_error
    assert results[3].is_error and "command is required" in texts[3]
    assert events[-1].stop_reason.type == "end_turn"


def test_a_refusal_ends_the_turn_with_its_stop_details(sdk, model, celery_worker, env_cloud, agent_bash):
    """A refused response ends the turn idle with stop_reason refusal and the upstream's
    stop_details (category, explanation), in the SDK's shape; without details, none is given."""
    details = {"type": "refusal", "category": "cyber", "explanation": "Declined: exploit development."}
    model.script([message([], "refusal", stop_details=details), message([], "refusal")])
    session = sdk.beta.sessions.create(agent=agent_bash.id, environment_id=env_cloud.id)
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(session.id, events=[_user("write an exploit")])
        seen = _collect_until_idle(stream)
    idle = seen[-1]
    assert idle.stop_reason.type == "refusal" and idle.stop_details is not None
    assert (idle.stop_details.category, idle.stop_details.explanation) == ("cyber", "Declined: exploit development.")
    sdk.beta.sessions.events.send(session.id, events=[_user("again")])
    events = _wait_idle(sdk, session.id)
    assert events[-1].stop_reason.type == "refusal" and events[-1].stop_details is None


def test_auto_permission_judges_each_tool_use_allow_ask_and_deny(sdk, model, celery_worker, env_cloud):
    """permission_policy auto: one judge call per tool use (a forced submit_judgement) before
    anything runs. Three scripted judgements: allowed runs, asked waits for the client's
    confirmation, denied is answered with an error result; the evaluations are the SDK's and
    the judge's usage counts in the session's."""
    agent = sdk.beta.agents.create(
        name="judged",
        model=MODEL,
        tools=[
            {"type": "agent_toolset_20260401", "configs": [{"name": "bash", "permission_policy": {"type": "auto"}}]}
        ],
    )
    verdicts = {"echo allowed": "allow", "git push --force": "ask", "cat ~/.ssh/id_rsa": "deny"}

    def decide(body: dict) -> dict:
        if (body.get("tool_choice") or {}).get("name") == "submit_judgement":
            asked = body["messages"][0]["content"]
            (decision,) = [d for command, d in verdicts.items() if command in asked]
            return tool_use("submit_judgement", {"decision": decision, "reason": "scripted"})
        if not any(
            isinstance(b, dict) and b.get("type") == "tool_result"
            for m in body["messages"]
            for b in m["content"]
            if isinstance(m["content"], list)
        ):
            return message(
                [
                    {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"command": c}}
                    for i, c in enumerate(verdicts)
                ],
                "tool_use",
            )
        return text("done")

    model.default = decide
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env_cloud.id)
    sdk.beta.sessions.events.send(session.id, events=[_user("go")])
    events = _wait_idle(sdk, session.id, timeout=40)
    uses = {e.input["command"]: e for e in events if e.type == "agent.tool_use"}
    assert {c: (u.evaluated_permission, u.evaluation.type) for c, u in uses.items()} == {
        "echo allowed": ("allow", "auto"), "git push --force": ("ask", "auto"), "cat ~/.ssh/id_rsa": ("deny", "auto"),
    }  # fmt: skip
    assert uses["git push --force"].evaluation.evaluated_permission.reason_code == "needs_approval"
    assert uses["cat ~/.ssh/id_rsa"].evaluation.evaluated_permission.reason_code == "high_risk"
    results = {e.tool_use_id: e for e in events if e.type == "agent.tool_result"}
    assert "allowed" in results[uses["echo allowed"].id].content[0].text
    denied = results[uses["cat ~/.ssh/id_rsa"].id]
    assert denied.is_error and "judged high-risk" in denied.content[0].text
    assert uses["git push --force"].id not in results  # not run: it waits for the client
    assert events[-1].stop_reason.type == "requires_action"
    assert events[-1].stop_reason.event_ids == [uses["git push --force"].id]
    judge_calls = [r for r in model.requests if (r["body"].get("tool_choice") or {}).get("name") == "submit_judgement"]
    assert len(judge_calls) == 3 and all(r["body"]["model"] == MODEL for r in judge_calls)
    usage = sdk.beta.sessions.retrieve(session.id).usage
    assert usage.input_tokens == 10 * (1 + 3)  # the turn's call and the three judgements

    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.tool_confirmation",
                "tool_use_id": uses["git push --force"].id,
                "result": "deny",
                "deny_message": "not now",
            }
        ],
    )
    wait_for(
        lambda: (
            _events(sdk, session.id)[-1].type == "session.status_idle"
            and _events(sdk, session.id)[-1].stop_reason.type == "end_turn"
        ),
        30,
    )
