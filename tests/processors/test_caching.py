"""processors.caching.with_breakpoints: where the cache breakpoints go, within the budget of four,
and that the caller's conversation, system prompt and tools are never changed (the result shares
what it does not mark with them)."""

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.caching import MAX_BREAKPOINTS, with_breakpoints

EPHEMERAL = {"type": "ephemeral"}

text_block = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5))
thinking_block = st.just({"type": "thinking", "thinking": "…", "signature": "sig"})
marked_block = st.builds(lambda t: {"type": "text", "text": t, "cache_control": dict(EPHEMERAL)}, st.text(max_size=3))
content = st.one_of(st.text(max_size=5), st.lists(st.one_of(text_block, thinking_block, marked_block), max_size=3))
message = st.builds(lambda role, c: {"role": role, "content": c}, st.sampled_from(["user", "assistant"]), content)
tool = st.builds(lambda n: {"name": n, "input_schema": {"type": "object", "properties": {}}}, st.text(max_size=4))
system = st.one_of(st.none(), st.text(min_size=1, max_size=5), st.lists(text_block, min_size=1, max_size=2))


def _marks(value) -> int:
    return json.dumps(value).count('"cache_control"')


@settings(max_examples=300, deadline=None)
@given(st.lists(message, max_size=5), st.lists(tool, max_size=3), system)
def test_breakpoints_leave_the_callers_values_unchanged_and_stay_within_four(messages, tools, system_prompt):
    before = copy.deepcopy((messages, tools, system_prompt))
    cached_system, cached_tools, cached_messages = with_breakpoints(
        system=system_prompt, tools=tools, messages=messages
    )
    assert (messages, tools, system_prompt) == before
    client_marks = _marks(messages)
    assert _marks([cached_system, cached_tools, cached_messages]) <= max(MAX_BREAKPOINTS, client_marks)
    assert _marks(cached_messages) >= client_marks  # the client's own breakpoints are kept
    # The same conversation, but for the breakpoints added (and string content as one text block).
    strip = json.loads(json.dumps(cached_messages).replace(', "cache_control": {"type": "ephemeral"}', ""))
    assert len(strip) == len(messages)
    assert [m["role"] for m in strip] == [m["role"] for m in messages]


def test_the_tail_the_system_prompt_and_the_tools_get_the_breakpoints():
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": [{"type": "text", "text": "c"}]},
    ]
    tools = [{"name": "one"}, {"name": "two"}]
    cached_system, cached_tools, cached = with_breakpoints(system="be brief", tools=tools, messages=messages)
    assert cached[0] == {"role": "user", "content": "first"}  # beyond the tail: as it was
    assert cached[1]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": EPHEMERAL},
    ]
    assert cached[2]["content"] == [{"type": "text", "text": "c", "cache_control": EPHEMERAL}]
    assert cached_system == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert cached_tools == [{"name": "one"}, {"name": "two", "cache_control": EPHEMERAL}]
    assert cached_tools[0] is tools[0]  # shared, not copied
    # A thinking block at the tail is never marked; with the client's own three breakpoints
    # (one of them on the tail already), the one left goes to the system prompt, none to the tools.
    marked = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}] * 3}]
    marked.append({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]})
    cached_system, cached_tools, cached = with_breakpoints(system="s", tools=tools, messages=marked)
    assert "cache_control" not in cached[1]["content"][-1]
    assert cached_system == [{"type": "text", "text": "s", "cache_control": EPHEMERAL}]
    assert "cache_control" not in cached_tools[-1]
