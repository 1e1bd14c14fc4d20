"""Every client-chosen field has a limit (docs/configuration.md "Field limits"): one over it is a 400 envelope
before anything is stored; at the limit it is accepted (issue 9 part 4)."""

import json

import pytest

from agents.models import Agent, AgentVersion, Environment
from core import limits
from sessions.models import Session, SessionEvent

pytestmark = pytest.mark.django_db

MODEL = "claude-sonnet-4-5"


def post(api, path, body):
    return api.post(path, json.dumps(body), content_type="application/json")


def counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Agent, AgentVersion, Environment, Session, SessionEvent))


@pytest.fixture
def made(api):
    agent = post(api, "/v1/agents", {"name": "a", "model": MODEL}).json()
    env = post(api, "/v1/environments", {"name": "e"}).json()
    session = post(api, "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"]}).json()
    return {"agent": agent["id"], "env": env["id"], "session": session["id"]}


def nested_object(levels: int) -> dict:
    value: dict = {"type": "object"}
    for _ in range(levels - 1):
        value = {"type": "object", "properties": {"x": value}}
    return value


def custom_tool(**overrides) -> dict:
    return {"type": "custom", "name": "t", "description": "d", "input_schema": {"type": "object"}, **overrides}


def text_event(text: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def over(n: int) -> str:
    return "x" * (n + 1)


def at(n: int) -> str:
    return "x" * n


# (route key, body builder given the over/at string builder and the `made` ids, error fragment)
AGENT = "/v1/agents"
CASES = {
    "agent name": (AGENT, lambda s, m: {"name": s(limits.NAME_MAX_CHARS), "model": MODEL}, "name"),
    "agent description": (
        AGENT,
        lambda s, m: {"name": "a", "model": MODEL, "description": s(limits.DESCRIPTION_MAX_CHARS)},
        "description",
    ),
    "agent system prompt": (
        AGENT,
        lambda s, m: {"name": "a", "model": MODEL, "system": s(limits.SYSTEM_MAX_CHARS)},
        "system",
    ),
    "model id": (AGENT, lambda s, m: {"name": "a", "model": s(limits.MODEL_ID_MAX_CHARS)}, "model"),
    "model object id": (AGENT, lambda s, m: {"name": "a", "model": {"id": s(limits.MODEL_ID_MAX_CHARS)}}, "model"),
    "metadata key": (AGENT, lambda s, m: {"name": "a", "model": MODEL, "metadata": {s(64): "v"}}, "metadata"),
    "metadata value": (AGENT, lambda s, m: {"name": "a", "model": MODEL, "metadata": {"k": s(512)}}, "metadata"),
    "custom tool description": (
        AGENT,
        lambda s, m: {
            "name": "a",
            "model": MODEL,
            "tools": [custom_tool(description=s(limits.TOOL_DESCRIPTION_MAX_CHARS))],
        },
        "description",
    ),
    "tool schema size": (
        AGENT,
        lambda s, m: {
            "name": "a",
            "model": MODEL,
            "tools": [custom_tool(input_schema={"type": "object", "description": s(limits.TOOL_SCHEMA_MAX_BYTES)})],
        },
        "input_schema",
    ),
    "mcp server url": (
        AGENT,
        lambda s, m: {
            "name": "a",
            "model": MODEL,
            "mcp_servers": [{"type": "url", "name": "s", "url": s(limits.URL_MAX_CHARS)}],
            "tools": [{"type": "mcp_toolset", "mcp_server_name": "s"}],
        },
        "url",
    ),
    "agent update system": (
        "agent_update",
        lambda s, m: {"system": s(limits.SYSTEM_MAX_CHARS)},
        "system",
    ),
    "environment name": ("/v1/environments", lambda s, m: {"name": s(limits.ENVIRONMENT_NAME_MAX_CHARS)}, "name"),
    "environment description": (
        "/v1/environments",
        lambda s, m: {"name": "e", "description": s(limits.DESCRIPTION_MAX_CHARS)},
        "description",
    ),
    "allowed host": (
        "/v1/environments",
        lambda s, m: {
            "name": "e",
            "config": {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": [s(limits.HOST_MAX_CHARS)]}},
        },
        "allowed_hosts",
    ),
    "package name": (
        "/v1/environments",
        lambda s, m: {
            "name": "e",
            "config": {
                "type": "cloud",
                "networking": {"type": "unrestricted"},
                "packages": {"pip": [s(limits.PACKAGE_MAX_CHARS)]},
            },
        },
        "pip",
    ),
    "environment update description": (
        "env_update",
        lambda s, m: {"description": s(limits.DESCRIPTION_MAX_CHARS)},
        "description",
    ),
    "session title": (
        "/v1/sessions",
        lambda s, m: {"agent": m["agent"], "environment_id": m["env"], "title": s(limits.TITLE_MAX_CHARS)},
        "title",
    ),
    "session agent system override": (
        "/v1/sessions",
        lambda s, m: {
            "agent": {"type": "agent_with_overrides", "id": m["agent"], "system": s(limits.SYSTEM_MAX_CHARS)},
            "environment_id": m["env"],
        },
        "system",
    ),
    "session update title": ("session_update", lambda s, m: {"title": s(limits.TITLE_MAX_CHARS)}, "title"),
    "session metadata value": (
        "session_update",
        lambda s, m: {"metadata": {"k": s(limits.METADATA_VALUE_MAX_CHARS)}},
        "metadata",
    ),
    "event text": ("events", lambda s, m: {"events": [text_event(s(limits.EVENT_TEXT_MAX_CHARS))]}, "text"),
    "initial event text": (
        "/v1/sessions",
        lambda s, m: {
            "agent": m["agent"],
            "environment_id": m["env"],
            "initial_events": [text_event(s(limits.EVENT_TEXT_MAX_CHARS))],
        },
        "text",
    ),
    "rubric": (
        "events",
        lambda s, m: {
            "events": [
                {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": s(262_144)}}
            ]
        },
        "rubric",
    ),
    "outcome description": (
        "events",
        lambda s, m: {
            "events": [
                {
                    "type": "user.define_outcome",
                    "description": s(limits.DESCRIPTION_MAX_CHARS),
                    "rubric": {"type": "text", "content": "r"},
                }
            ]
        },
        "description",
    ),
    "tool confirmation deny message": (
        "events",
        lambda s, m: {
            "events": [
                {
                    "type": "user.tool_confirmation",
                    "tool_use_id": "sevt_x",
                    "result": "deny",
                    "deny_message": s(limits.EVENT_TEXT_MAX_CHARS),
                }
            ]
        },
        "deny_message",
    ),
    "resource mount path": (
        "resources",
        lambda s, m: {"type": "file", "file_id": "file_x", "mount_path": "/" + s(1023)},
        "mount_path",
    ),
}


def _path(route: str, made: dict) -> str:
    return {
        "agent_update": f"/v1/agents/{made['agent']}",
        "env_update": f"/v1/environments/{made['env']}",
        "session_update": f"/v1/sessions/{made['session']}",
        "events": f"/v1/sessions/{made['session']}/events",
        "resources": f"/v1/sessions/{made['session']}/resources",
    }.get(route, route)


@pytest.mark.parametrize("case", list(CASES))
def test_one_over_each_limit_is_400_and_stores_nothing(api, made, case):
    route, build, fragment = CASES[case]
    before = counts()
    session_before = api.get(f"/v1/sessions/{made['session']}").json()
    response = post(api, _path(route, made), build(over, made))
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert body["error"]["type"] == "invalid_request_error"
    assert fragment in body["error"]["message"], body["error"]["message"]
    assert counts() == before
    session_after = api.get(f"/v1/sessions/{made['session']}").json()
    assert (session_after["title"], session_after["metadata"]) == (session_before["title"], session_before["metadata"])


@pytest.mark.parametrize(
    "case",
    [
        "agent name",
        "agent system prompt",
        "model id",
        "metadata value",
        "environment name",
        "environment description",
        "session title",
    ],
)
def test_at_each_limit_is_accepted(api, made, case):
    route, build, _ = CASES[case]
    response = post(api, _path(route, made), build(at, made))
    assert response.status_code == 200, response.content[:300]


def test_counts_are_limited(api, made):
    before = counts()
    session = f"/v1/sessions/{made['session']}"
    cases = [
        ("/v1/agents", {"name": "a", "model": MODEL, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        (
            "/v1/agents",
            {"name": "a", "model": MODEL, "tools": [custom_tool(name=f"t{i}") for i in range(limits.TOOLS_MAX + 1)]},
            "tools",
        ),
        (
            "/v1/agents",
            {
                "name": "a",
                "model": MODEL,
                "mcp_servers": [{"type": "url", "name": f"s{i}", "url": "https://x"} for i in range(21)],
            },
            "mcp_servers",
        ),
        (
            "/v1/environments",
            {
                "name": "e",
                "config": {
                    "type": "cloud",
                    "networking": {
                        "type": "limited",
                        "allowed_hosts": [f"h{i}.example" for i in range(limits.ALLOWED_HOSTS_MAX + 1)],
                    },
                },
            },
            "allowed_hosts",
        ),
        (
            "/v1/environments",
            {
                "name": "e",
                "config": {
                    "type": "cloud",
                    "networking": {"type": "unrestricted"},
                    "packages": {"npm": [f"p{i}" for i in range(limits.PACKAGES_PER_MANAGER_MAX + 1)]},
                },
            },
            "npm",
        ),
        (
            f"{session}/events",
            {"events": [text_event("x") for _ in range(limits.EVENTS_PER_REQUEST_MAX + 1)]},
            "events",
        ),
        (
            f"{session}/events",
            {
                "events": [
                    {
                        "type": "user.message",
                        "content": [{"type": "text", "text": "x"}] * (limits.EVENT_BLOCKS_MAX + 1),
                    }
                ]
            },
            "content",
        ),
        (session, {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ]
    for path, body, fragment in cases:
        response = post(api, path, body)
        assert response.status_code == 400, (path, response.content[:300])
        assert fragment in response.json()["error"]["message"], response.json()["error"]["message"]
    assert counts() == before


def test_tool_schema_depth_is_limited(api, made):
    before = counts()
    deep = {"name": "a", "model": MODEL, "tools": [custom_tool(input_schema=nested_object(20))]}
    response = post(api, "/v1/agents", deep)
    assert response.status_code == 400
    assert "input_schema" in response.json()["error"]["message"]
    assert counts() == before
    ok = {"name": "a", "model": MODEL, "tools": [custom_tool(input_schema=nested_object(10))]}
    assert post(api, "/v1/agents", ok).status_code == 200


def test_whole_agent_configuration_is_limited(api, made):
    """Each field within its limit, but together over AGENT_CONFIG_MAX_BYTES: every session
    snapshots the configuration, so it is bounded as a whole."""
    before = counts()
    big_schema = {"type": "object", "description": "x" * (limits.TOOL_SCHEMA_MAX_BYTES - 100)}
    tools = [custom_tool(name=f"t{i}", input_schema=big_schema) for i in range(20)]
    response = post(api, "/v1/agents", {"name": "a", "model": MODEL, "tools": tools})
    assert response.status_code == 400
    assert "configuration" in response.json()["error"]["message"]
    assert counts() == before


def _walk(api, path: str, limit: int) -> list[list[str]]:
    pages, page = [], None
    while True:
        query = {"limit": limit, **({"page": page} if page else {})}
        body = api.get(path, query).json()
        pages.append([row["id"] for row in body["data"]])
        page = body["next_page"]
        if not page:
            return pages


def test_list_responses_are_bounded_in_bytes_whatever_the_limit(api, made, settings):
    """With rows of ~3 kB and a 10 kB budget, limit=1000 pages hold at most 4 rows; walking
    the pages still yields every row exactly once, in order."""
    settings.MANGO_LIST_RESPONSE_MAX_BYTES = 10_000
    system = "s" * 3000
    agents = [post(api, "/v1/agents", {"name": f"a{i}", "model": MODEL, "system": system}).json() for i in range(9)]
    for agent in agents[:6]:
        post(api, "/v1/sessions", {"agent": agent["id"], "environment_id": made["env"]})
    events = {"events": [text_event("t" * 3000) for _ in range(7)]}
    assert post(api, f"/v1/sessions/{made['session']}/events", events).status_code == 200

    agent_pages = _walk(api, "/v1/agents", 100)
    assert all(len(page) <= 4 for page in agent_pages) and len(agent_pages) >= 3
    flat = [agent_id for page in agent_pages for agent_id in page]
    assert flat == [a["id"] for a in reversed(agents)] + [made["agent"]]
    assert len(set(flat)) == len(flat) == 10

    session_pages = _walk(api, "/v1/sessions", 1000)
    assert all(len(page) <= 4 for page in session_pages) and sum(map(len, session_pages)) == 7

    event_pages = _walk(api, f"/v1/sessions/{made['session']}/events", 1000)
    assert all(len(page) <= 4 for page in event_pages) and sum(map(len, event_pages)) == 7

    # One row larger than the whole budget still comes back, alone.
    settings.MANGO_LIST_RESPONSE_MAX_BYTES = 100
    assert len(api.get("/v1/agents", {"limit": 100}).json()["data"]) == 1
