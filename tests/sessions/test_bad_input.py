"""Bad input is a 4xx envelope, never a 5xx, and stores nothing (issue 11 part 3, API side):
hand-made cursors, out-of-range timestamps, deep JSON, NUL and unpaired surrogates."""

import base64
import json

import pytest

from agents.models import Agent, AgentVersion, Environment
from core.pagination import cursor_encode
from sessions.models import Session, SessionEvent

pytestmark = pytest.mark.django_db

MODEL = "claude-sonnet-4-5"


def post(api, path, body):
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return api.post(path, raw, content_type="application/json")


def assert_400(response, fragment: str | None = None) -> dict:
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    if fragment:
        assert fragment in body["error"]["message"], body["error"]["message"]
    return body


def counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Agent, AgentVersion, Environment, Session, SessionEvent))


@pytest.fixture
def made(api):
    agent = post(api, "/v1/agents", {"name": "a", "model": MODEL}).json()
    env = post(api, "/v1/environments", {"name": "e"}).json()
    session = post(api, "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"]}).json()
    return {"agent": agent["id"], "env": env["id"], "session": session["id"]}


def _unsigned(payload) -> str:
    raw = json.dumps(payload).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


HAND_MADE = [
    _unsigned({"k": None, "d": "n"}),
    _unsigned({"k": "\u0000", "d": "n"}),
    _unsigned({"k": "abc", "d": "n"}),
    _unsigned({"k": 1, "d": "p"}),
    _unsigned({"k": [1], "d": "n"}),
    _unsigned([1, 2]),
    "page_" + "A" * 40,
    "page_%00",
    "page_" + "x" * 600,
    "nonsense",
]


def list_paths(made) -> list[str]:
    return [
        "/v1/agents",
        f"/v1/agents/{made['agent']}/versions",
        "/v1/environments",
        "/v1/sessions",
        f"/v1/sessions/{made['session']}/events",
        f"/v1/sessions/{made['session']}/resources",
    ]


@pytest.mark.parametrize("cursor", HAND_MADE)
def test_hand_made_cursors_are_400_on_every_list(api, made, cursor):
    for path in list_paths(made):
        assert_400(api.get(path, {"page": cursor}), "page")


def test_signed_cursor_of_one_listing_is_refused_by_another(api, made):
    # Well-formed and signed, but for the agents listing: the sessions and environments
    # listings refuse it, and a forged payload under a real signature is refused everywhere.
    agents_cursor = cursor_encode({"k": made["agent"], "d": "n"}, purpose="agents")
    assert api.get("/v1/agents", {"page": agents_cursor}).status_code == 200
    for path in list_paths(made)[1:]:
        assert_400(api.get(path, {"page": agents_cursor}), "page")
    for payload in ({"k": None, "d": "n"}, {"k": "x", "d": "sideways"}, {"k": "x"}, {"k": True, "d": "n"}):
        assert_400(api.get("/v1/agents", {"page": cursor_encode(payload, purpose="agents")}), "page")
    events_cursor = cursor_encode({"k": "seven", "d": "n"}, purpose="events")
    assert_400(api.get(f"/v1/sessions/{made['session']}/events", {"page": events_cursor}), "page")


@pytest.mark.parametrize(
    "param, value",
    [
        ("created_at[lt]", "2020-01-01T00:00:00+99:00"),
        ("created_at[gte]", "0001-01-01T00:00:00+23:59"),
        ("created_at[lte]", "9999-12-31T23:59:59-23:59"),
        ("created_at[gt]", "2020-13-45T00:00:00Z"),
        ("created_at[gt]", "yesterday"),
    ],
)
def test_out_of_range_timestamps_are_400(api, made, param, value):
    for path in ("/v1/agents", "/v1/sessions", f"/v1/sessions/{made['session']}/events"):
        assert_400(api.get(path, {param: value}), param)


def test_in_range_extreme_timestamps_still_filter(api, made):
    assert api.get("/v1/sessions", {"created_at[gte]": "0001-01-01T23:59:00+23:59"}).json()["data"]
    assert api.get("/v1/sessions", {"created_at[lt]": "2000-01-01T00:00:00+14:00"}).json()["data"] == []


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def json_routes(made) -> list[str]:
    return [
        "/v1/agents",
        f"/v1/agents/{made['agent']}",
        "/v1/environments",
        f"/v1/environments/{made['env']}",
        "/v1/sessions",
        f"/v1/sessions/{made['session']}",
        f"/v1/sessions/{made['session']}/events",
        f"/v1/sessions/{made['session']}/resources",
    ]


def test_json_nested_10000_levels_is_400_on_every_route(api, made):
    before = counts()
    bomb = '{"name": ' + _nested(10_000) + "}"
    for path in json_routes(made):
        assert_400(post(api, path, bomb))
        assert_400(post(api, path, _nested(10_000)))
    assert counts() == before


def test_content_block_nested_500_levels_is_400(api, made):
    before = counts()
    block = {"type": "text", "text": "hi", "citations": json.loads(_nested(500))}
    event = {"type": "user.message", "content": [block]}
    assert_400(post(api, f"/v1/sessions/{made['session']}/events", {"events": [event]}), "nested")
    deep_source = {"type": "image", "source": {"type": "base64", "data": json.loads(_nested(40))}}
    event = {"type": "user.message", "content": [deep_source]}
    assert_400(post(api, f"/v1/sessions/{made['session']}/events", {"events": [event]}), "nested")
    assert counts() == before


BAD_STRINGS = ["a\u0000b", "\ud800", "x\udfffy"]


def _raw(body: dict) -> str:
    """JSON with the escapes kept (json.dumps writes \\u0000 and \\ud800 as escapes)."""
    return json.dumps(body)


@pytest.mark.parametrize("bad", BAD_STRINGS)
def test_nul_and_unpaired_surrogates_are_400_and_store_nothing(api, made, bad):
    before = counts()
    session = made["session"]
    cases = [
        ("/v1/agents", {"name": bad, "model": MODEL}),
        ("/v1/agents", {"name": "a", "model": MODEL, "metadata": {bad: "v"}}),
        ("/v1/agents", {"name": "a", "model": MODEL, "metadata": {"k": bad}}),
        ("/v1/agents", {"name": "a", "model": MODEL, "system": bad}),
        (f"/v1/agents/{made['agent']}", {"name": bad}),
        ("/v1/environments", {"name": bad}),
        ("/v1/environments", {"name": "e", "metadata": {"k": bad}}),
        (f"/v1/environments/{made['env']}", {"description": bad}),
        ("/v1/sessions", {"agent": made["agent"], "environment_id": made["env"], "title": bad}),
        ("/v1/sessions", {"agent": made["agent"], "environment_id": made["env"], "metadata": {bad: "v"}}),
        (f"/v1/sessions/{session}", {"title": bad}),
        (f"/v1/sessions/{session}", {"metadata": {"k": bad}}),
        (
            f"/v1/sessions/{session}/events",
            {"events": [{"type": "user.message", "content": [{"type": "text", "text": bad}]}]},
        ),
        (f"/v1/sessions/{session}/resources", {"type": "file", "file_id": bad}),
    ]
    for path, body in cases:
        assert_400(post(api, path, _raw(body)), "must not contain")
    assert counts() == before
    assert api.get(f"/v1/sessions/{session}").json()["title"] is None


@pytest.mark.parametrize(
    "path",
    [
        "/v1/agents/agent_%00",
        "/v1/sessions?agent_id=%00",
        "/v1/sessions?statuses[]=%00",
        "/v1/files?scope_id=%00",
        "/v1/environments/env%00x/archive",
    ],
)
def test_nul_in_the_url_is_400(api, path):
    assert_400(api.get(path))


@pytest.mark.parametrize(
    "query",
    ["agent_version=99999999999999999999", "agent_version=3000000000", "limit=" + "9" * 5000, "order=sideways"],
)
def test_out_of_range_query_integers_are_400(api, made, query):
    assert_400(api.get(f"/v1/sessions?agent_id={made['agent']}&{query}"))


def test_huge_integers_in_bodies_are_400(api, made):
    before = counts()
    assert_400(post(api, f"/v1/agents/{made['agent']}", {"version": 2**70, "name": "x"}))
    ref = {"type": "agent", "id": made["agent"], "version": 2**40}
    assert_400(post(api, "/v1/sessions", {"agent": ref, "environment_id": made["env"]}))
    assert counts() == before
