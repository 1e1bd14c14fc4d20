"""The scripted upstream itself, through the official SDK's Messages API (plain and streamed)."""

import time

import anthropic
import pytest

from tests.scripted_model import error, text, tool_use


@pytest.fixture
def client(model):
    return anthropic.Anthropic(base_url=model.url, api_key="k", max_retries=0)


def test_serves_the_script_in_order_and_records_requests(model, client):
    model.script([tool_use("bash", {"command": "ls"}, text_before="Let me look."), text("done")])
    first = client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert first.content[1].input == {"command": "ls"}
    with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "again"}]) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "done" and final.stop_reason == "end_turn"
    assert [r["body"]["messages"][0]["content"] for r in model.requests] == ["hi", "again"]
    assert model.requests[1]["body"]["stream"] is True
    assert model.remaining == 0
    assert client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}]).content[0].text


def test_errors_and_delays(model, client):
    model.script([error(529, "overloaded_error"), error(500), text("slow", delay=0.3)])
    with pytest.raises(anthropic.APIStatusError) as excinfo:
        client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    assert excinfo.value.status_code == 529
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    started = time.monotonic()
    client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    assert time.monotonic() - started >= 0.3
    assert len(model.wait_for_requests(3)) == 3


def test_callable_responses(model, client):
    model.script([lambda body: text(f"echo {body['messages'][-1]['content']}")])
    reply = client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "ping"}])
    assert reply.content[0].text == "echo ping"
