"""The offline model (`make scripted-model`, tests/scripted_model.py `offline`) drives the tool
paths a newcomer wants to see without a paid key: a `bash: <command>` line runs in the session's
real Docker sandbox, an output File is written and downloadable, and the answer quotes the tool's
output. Through the official SDK, a real Celery worker and dockerd."""

import pytest

from tests.scripted_model import offline, tool_calls_in

pytestmark = [pytest.mark.docker]

OFFERED = {"bash", "read", "mcp__docs__search"}


def test_lines_naming_offered_tools_become_tool_uses_and_the_rest_is_text():
    said = "\n".join(
        [
            "please:",
            "bash: echo hi > /mnt/session/outputs/a.txt",
            'read: {"file_path": "/workspace/a.txt"}',
            'mcp__docs__search: {"query": "mango"}',
            'write: {"file_path": "/x"}',  # not offered
            "read: not json",
            "bash:",
        ]
    )
    assert tool_calls_in(said, OFFERED) == [
        ("bash", {"command": "echo hi > /mnt/session/outputs/a.txt"}),
        ("read", {"file_path": "/workspace/a.txt"}),
        ("mcp__docs__search", {"query": "mango"}),
    ]


def test_a_message_without_tool_lines_is_echoed_and_tool_results_are_quoted_back():
    tools = [{"name": "bash"}]
    echoed = offline({"tools": tools, "messages": [{"role": "user", "content": "hello"}]})
    assert echoed["content"] == [{"type": "text", "text": "(scripted model) You said: hello"}]
    results = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "hi\n"}]},
            {"type": "tool_result", "tool_use_id": "t2", "content": "no such file", "is_error": True},
        ],
    }
    answered = offline({"tools": tools, "messages": [{"role": "user", "content": "bash: x"}, results]})
    assert answered["stop_reason"] == "end_turn"
    assert answered["content"][0]["text"] == "(scripted model) The tools answered:\nhi\n(error) no such file"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_offline_model_runs_bash_in_the_sandbox_and_the_output_file_downloads(sdk, model, celery_worker):
    model.default = offline
    agent = sdk.beta.agents.create(
        name="offline", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    command = "echo made offline > /mnt/session/outputs/hello.txt && cat /mnt/session/outputs/hello.txt"
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": f"bash: {command}"}]}]
        )
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                break
    (tool_use,) = [e for e in seen if e.type == "agent.tool_use"]
    assert tool_use.name == "bash" and tool_use.input == {"command": command}
    (result,) = [e for e in seen if e.type == "agent.tool_result"]
    assert not result.is_error and "made offline" in "".join(block.text for block in result.content)
    answer = "".join(block.text for e in seen if e.type == "agent.message" for block in e.content)
    assert answer.startswith("(scripted model) The tools answered:\nmade offline\n") and "exit status: 0" in answer
    (published,) = list(sdk.beta.files.list(scope_id=session.id))
    assert published.filename == "hello.txt" and published.downloadable
    assert sdk.beta.files.download(published.id).read() == b"made offline\n"
