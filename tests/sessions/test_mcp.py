"""MCP in the worker, end to end: the official SDK against the live server, a real Celery worker,
the scripted model upstream, and a real MCP server (the `mcp` SDK's, streamable HTTP) on loopback
that requires a bearer token, with an OAuth token endpoint beside it (tests/mcp_server.py).

Covered: the tools offered (collision-free names, configs applied), agent.mcp_tool_use /
agent.mcp_tool_result with the SDK's fields, the server saw the vault's token, refresh before
expiry and on a 401, both MCP errors (the session stays usable), always_ask, the call timeout
and result limit, self_hosted, the private-address guard, and the secret in no event, model
request, worker log or pg_dump."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet, MultiFernet

from core import secrets
from tests.mcp_server import McpTestServer
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for
from tests.sessions.test_vaults import pg_dump
from vaults.models import VaultCredential

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

MODEL = "claude-sonnet-4-5"
TOKEN = "mcp-static-PLAINTEXT-9d1c"
ACCESS = "mcp-access-PLAINTEXT-4e2a"
REFRESH = "mcp-refresh-PLAINTEXT-7b3f"
CALL_TIMEOUT = 3
RESULT_MAX = 4096


@pytest.fixture(scope="module")
def mcp_server():
    server = McpTestServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mcp_worker(celery_worker, mcp_server):
    """The run's worker, replaced for this module by one that may reach the test server (and
    only it) on loopback, with a short call timeout and a small result limit."""
    celery_worker.kill()
    worker = celery_worker.start_new(
        MANGO_OUTBOUND_PRIVATE_HOSTS=mcp_server.host,
        MANGO_MCP_CALL_TIMEOUT_SECONDS=str(CALL_TIMEOUT),
        MANGO_MCP_CONNECT_TIMEOUT_SECONDS="5",
        MANGO_MCP_RESULT_MAX_BYTES=str(RESULT_MAX),
        MANGO_LOG_LEVEL="DEBUG",
    )
    yield worker
    celery_worker.kill()
    celery_worker.start_new()


@pytest.fixture
def server(mcp_server, settings, mcp_worker):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    mcp_server.accepted.clear()
    mcp_server.seen_tokens.clear()
    mcp_server.token_requests.clear()
    mcp_server.calls.clear()
    mcp_server.issue = {}
    mcp_server.token_status = 200
    return mcp_server


@pytest.fixture
def env(sdk):
    return sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})


def _user(value: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": value}]}


def _events(sdk, session_id: str) -> list:
    return list(sdk.beta.sessions.events.list(session_id))


def _wait_idle(sdk, session_id: str, count: int = 1, timeout: float = 40.0) -> list:
    def idle():
        events = _events(sdk, session_id)
        idles = [e for e in events if e.type == "session.status_idle"]
        return events if len(idles) >= count and events[-1].type == "session.status_idle" else None

    return wait_for(idle, timeout, interval=0.1)


def _agent(sdk, server, *, toolset: dict | None = None, extra_tools: list | None = None, name="tools", url=None):
    toolset = {"type": "mcp_toolset", "mcp_server_name": name, **(toolset or {})}
    return sdk.beta.agents.create(
        name="mcp-agent",
        model=MODEL,
        mcp_servers=[{"type": "url", "name": name, "url": url or server.url}],
        tools=[toolset, *(extra_tools or [])],
    )


def _vault(sdk, server, auth: dict | None = None):
    vault = sdk.beta.vaults.create(display_name="v")
    sdk.beta.vaults.credentials.create(
        vault.id, auth=auth or {"type": "static_bearer", "token": TOKEN, "mcp_server_url": server.url}
    )
    return vault


ALLOW = {"default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}}}


def _worker_log(worker) -> str:
    return worker.log_path.read_text(errors="replace")


def test_mcp_tools_are_offered_called_and_evented_with_the_vaults_token(sdk, model, server, env, mcp_worker):
    server.accepted.add(TOKEN)
    toolset = {**ALLOW, "configs": [{"name": "explode", "enabled": False}]}
    custom = {
        "type": "custom",
        "name": "mcp__tools__echo",
        "description": "a custom tool whose name an MCP tool would take",
        "input_schema": {"type": "object", "properties": {}},
    }
    agent = _agent(sdk, server, toolset=toolset, extra_tools=[custom])
    model.script([tool_use("mcp__tools__add", {"a": 2, "b": 3}), text("2 + 3 = 5.")])
    vault = _vault(sdk, server)
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    sdk.beta.sessions.events.send(session.id, events=[_user("add 2 and 3")])
    events = _wait_idle(sdk, session.id)

    offered = {tool["name"]: tool for tool in model.requests[0]["body"]["tools"]}
    assert {"mcp__tools__add", "mcp__tools__echo_2", "mcp__tools__big", "mcp__tools__echo"} <= set(offered)
    assert not any("explode" in name for name in offered)  # disabled by its config
    assert offered["mcp__tools__add"]["description"] == "Add two integers."
    assert offered["mcp__tools__add"]["input_schema"]["properties"].keys() == {"a", "b"}

    use = next(e for e in events if e.type == "agent.mcp_tool_use")
    assert use.name == "add" and use.mcp_server_name == "tools" and use.input == {"a": 2, "b": 3}
    assert use.evaluated_permission == "allow" and use.evaluation.type == "always_allow"
    result = next(e for e in events if e.type == "agent.mcp_tool_result")
    assert result.mcp_tool_use_id == use.id and result.is_error is False
    assert [block.model_dump() for block in result.content] == [{"type": "text", "text": "5"}]
    assert [e.type for e in events if e.type == "session.error"] == []
    assert events[-1].stop_reason.type == "end_turn"
    assert server.calls == [("add", {"a": 2, "b": 3})]
    assert set(server.seen_tokens) == {TOKEN}  # every request carried the vault's token

    # The model saw its call and the result under the name it used.
    second = model.requests[1]["body"]["messages"]
    assert any(
        block.get("type") == "tool_use" and block["name"] == "mcp__tools__add" and block["id"] == use.id
        for message in second
        for block in message["content"]
        if isinstance(block, dict)
    )
    assert "5" in json.dumps(second[-1])
    assert VaultCredential.objects.get(vault_id=vault.id).last_used_at is not None

    # The token is in no event, model request, worker log line or database row.
    everywhere = json.dumps([e.model_dump(mode="json") for e in events]) + json.dumps(model.requests)
    assert TOKEN not in everywhere
    assert TOKEN not in _worker_log(mcp_worker)
    assert TOKEN not in pg_dump()


def test_always_ask_waits_for_the_users_confirmation(sdk, model, server, env):
    server.accepted.add(TOKEN)
    toolset = {"configs": [{"name": "echo", "permission_policy": {"type": "always_ask"}}]}
    agent = _agent(sdk, server, toolset=toolset)
    model.script([tool_use("mcp__tools__echo", {"text": "hi"}), text("Waiting.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[_vault(sdk, server).id])
    sdk.beta.sessions.events.send(session.id, events=[_user("echo hi")])
    events = _wait_idle(sdk, session.id)
    use = next(e for e in events if e.type == "agent.mcp_tool_use")
    assert use.evaluated_permission == "ask" and use.evaluation.type == "always_ask"
    assert events[-1].stop_reason.type == "requires_action" and events[-1].stop_reason.event_ids == [use.id]
    assert server.calls == []  # nothing called before the user says so

    model.script([text("Echoed.")])
    confirm = {"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}
    sdk.beta.sessions.events.send(session.id, events=[confirm])
    events = _wait_idle(sdk, session.id, count=2)
    result = next(e for e in events if e.type == "agent.mcp_tool_result")
    assert result.mcp_tool_use_id == use.id and result.content[0].text == "hi" and not result.is_error
    assert server.calls == [("echo", {"text": "hi"})]

    # A denied call is answered with an error and never reaches the server.
    model.script([tool_use("mcp__tools__echo", {"text": "no"}), text("Denied, fine.")])
    sdk.beta.sessions.events.send(session.id, events=[_user("echo no")])
    events = _wait_idle(sdk, session.id, count=3)
    denied_use = [e for e in events if e.type == "agent.mcp_tool_use"][-1]
    deny = {"type": "user.tool_confirmation", "tool_use_id": denied_use.id, "result": "deny", "deny_message": "No."}
    sdk.beta.sessions.events.send(session.id, events=[deny])
    events = _wait_idle(sdk, session.id, count=4)
    denied = [e for e in events if e.type == "agent.mcp_tool_result"][-1]
    assert denied.mcp_tool_use_id == denied_use.id and denied.is_error and denied.content[0].text == "No."
    assert server.calls == [("echo", {"text": "hi"})]


def _oauth(server, *, expires_in: int) -> dict:
    return {
        "type": "mcp_oauth",
        "mcp_server_url": server.url,
        "access_token": ACCESS,
        "expires_at": datetime.now(UTC) + timedelta(seconds=expires_in),
        "refresh": {
            "client_id": "mango",
            "refresh_token": REFRESH,
            "token_endpoint": server.token_url,
            "token_endpoint_auth": {"type": "none"},
        },
    }


def test_oauth_tokens_are_refreshed_before_expiry_and_on_a_401(sdk, model, server, env, mcp_worker):
    agent = _agent(sdk, server, toolset=ALLOW)
    # Expiring within the refresh margin (60 s): refreshed before the first connection.
    vault = _vault(sdk, server, auth=_oauth(server, expires_in=30))
    server.issue = {"access_token": "fresh-access-A", "refresh_token": "fresh-refresh-A", "expires_in": 3600}
    model.script([tool_use("mcp__tools__add", {"a": 1, "b": 1}), text("2.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    sdk.beta.sessions.events.send(session.id, events=[_user("1+1")])
    events = _wait_idle(sdk, session.id)
    assert next(e for e in events if e.type == "agent.mcp_tool_result").content[0].text == "2"
    assert server.token_requests[0]["refresh_token"] == REFRESH and server.token_requests[0]["client_id"] == "mango"
    assert ACCESS not in server.seen_tokens and "fresh-access-A" in server.seen_tokens
    row = VaultCredential.objects.get(vault_id=vault.id)
    assert json.loads(secrets.decrypt(row.secret))["refresh_token"] == "fresh-refresh-A"  # stored

    # Not expiring, but the server no longer takes the token: a 401, a refresh, the call goes on.
    server.accepted.clear()
    server.issue = {"access_token": "fresh-access-B", "expires_in": 3600}
    model.script([tool_use("mcp__tools__add", {"a": 2, "b": 2}), text("4.")])
    sdk.beta.sessions.events.send(session.id, events=[_user("2+2")])
    events = _wait_idle(sdk, session.id, count=2)
    assert [e for e in events if e.type == "agent.mcp_tool_result"][-1].content[0].text == "4"
    assert server.token_requests[-1]["refresh_token"] == "fresh-refresh-A"
    assert server.seen_tokens[-1] == "fresh-access-B"
    assert [e.type for e in events if e.type == "session.error"] == []
    for secret in (ACCESS, REFRESH, "fresh-access-A", "fresh-refresh-A", "fresh-access-B"):
        assert secret not in json.dumps([e.model_dump(mode="json") for e in events])
        assert secret not in _worker_log(mcp_worker)


def test_a_refused_token_is_an_authentication_error_and_the_session_stays_usable(sdk, model, server, env):
    server.accepted.add("something-else")
    agent = _agent(sdk, server, toolset=ALLOW)
    model.script([text("No tools today.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[_vault(sdk, server).id])
    sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
    events = _wait_idle(sdk, session.id)
    error = next(e for e in events if e.type == "session.error").error
    assert error.type == "mcp_authentication_failed_error" and "'tools'" in error.message
    # The turn goes on without the server's tools (not `exhausted`: that would say the turn is dead).
    assert error.mcp_server_name == "tools" and error.retry_status.type == "retrying"
    assert TOKEN not in error.message
    assert not any(tool["name"].startswith("mcp__") for tool in model.requests[0]["body"].get("tools") or [])
    assert events[-1].stop_reason.type == "end_turn"

    server.accepted.add(TOKEN)  # fixed: the next turn connects
    model.script([tool_use("mcp__tools__echo", {"text": "back"}), text("Back.")])
    sdk.beta.sessions.events.send(session.id, events=[_user("again")])
    events = _wait_idle(sdk, session.id, count=2)
    assert [e for e in events if e.type == "agent.mcp_tool_result"][-1].content[0].text == "back"


def test_a_credential_the_key_cannot_read_is_an_authentication_error_naming_the_setting(sdk, model, server, env):
    server.accepted.add(TOKEN)
    agent = _agent(sdk, server, toolset=ALLOW)
    vault = _vault(sdk, server)
    # The stored secret was sealed under a key this server no longer has (a botched rotation).
    foreign = MultiFernet([Fernet(secrets.generate_key().encode())]).encrypt(b'{"token": "x"}').decode()
    VaultCredential.objects.filter(vault_id=vault.id).update(secret=foreign)
    model.script([text("No tools today.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    seen = len(server.seen_tokens)
    sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
    events = _wait_idle(sdk, session.id)
    error = next(e for e in events if e.type == "session.error").error
    assert error.type == "mcp_authentication_failed_error" and "MANGO_VAULT_KEY" in error.message, error
    assert server.seen_tokens[seen:] == []  # no connection was attempted without its credential
    assert events[-1].stop_reason.type == "end_turn"


def test_an_unreachable_or_private_server_is_a_connection_error_naming_it(sdk, model, server, env):
    missing = server.url.replace("/mcp", "/no-mcp-here")  # an allowed host:port that serves no MCP
    other = McpTestServer().start()  # a loopback server the operator did not allow
    try:
        other.accepted.add(TOKEN)
        nowhere = "https://mcp.no-such-host.invalid/mcp"  # .invalid never resolves (RFC 6761)
        for name, url, says in (
            ("down", missing, "could not be reached"),
            ("inside", other.url, "private address"),
            ("nowhere", nowhere, "mcp.no-such-host.invalid does not resolve"),
        ):
            agent = _agent(sdk, server, toolset=ALLOW, name=name, url=url)
            model.script([text("Fine without it.")])
            session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
            sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
            events = _wait_idle(sdk, session.id)
            error = next(e for e in events if e.type == "session.error").error
            assert error.type == "mcp_connection_failed_error" and f"'{name}'" in error.message, error
            assert error.mcp_server_name == name and error.retry_status.type == "retrying"
            assert says in error.message
            assert name == "inside" or "private" not in error.message  # the real cause, not another
            assert events[-1].stop_reason.type == "end_turn"
        assert other.seen_tokens == []  # the guard refused before any request
    finally:
        other.stop()


def test_a_changed_tool_list_is_offered_again(sdk, model, server, env):
    server.accepted.add(TOKEN)
    agent = _agent(sdk, server, toolset=ALLOW)
    model.script(
        [
            tool_use("mcp__tools__grow", {}),
            tool_use("mcp__tools__echo", {"text": "after"}),
            tool_use("mcp__tools__fresh", {}),
            text("Done."),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[_vault(sdk, server).id])
    try:
        sdk.beta.sessions.events.send(session.id, events=[_user("grow")])
        events = _wait_idle(sdk, session.id)
    finally:
        server.mcp.remove_tool("fresh")
    offered = [{tool["name"] for tool in request["body"]["tools"]} for request in model.requests]
    assert "mcp__tools__fresh" not in offered[0]
    assert "mcp__tools__fresh" in offered[2]  # listed again after the server's tools/list_changed
    results = [e for e in events if e.type == "agent.mcp_tool_result"]
    assert [r.content[0].text for r in results] == ["grown", "after", "fresh"]


def test_calls_have_a_timeout_and_a_result_limit(sdk, model, server, env):
    server.accepted.add(TOKEN)
    agent = _agent(sdk, server, toolset=ALLOW)
    model.script(
        [
            tool_use("mcp__tools__slow", {"seconds": CALL_TIMEOUT + 2}),
            tool_use("mcp__tools__big", {"size": RESULT_MAX * 2}),
            tool_use("mcp__tools__explode", {}),
            text("Done."),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[_vault(sdk, server).id])
    sdk.beta.sessions.events.send(session.id, events=[_user("go")])
    events = _wait_idle(sdk, session.id, timeout=60)
    slow, big, exploded = [e for e in events if e.type == "agent.mcp_tool_result"]
    assert slow.is_error and "timed out" in slow.content[0].text
    assert big.is_error and f"limit of {RESULT_MAX} bytes" in big.content[0].text
    assert exploded.is_error  # the tool's own error, as the server reported it
    assert events[-1].stop_reason.type == "end_turn"


def test_on_self_hosted_mcp_tools_run_server_side(sdk, model, server):
    server.accepted.add(TOKEN)
    env = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    agent = _agent(sdk, server, toolset=ALLOW)
    model.script([tool_use("mcp__tools__add", {"a": 4, "b": 5}), text("9.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[_vault(sdk, server).id])
    sdk.beta.sessions.events.send(session.id, events=[_user("4+5")])
    events = _wait_idle(sdk, session.id)
    assert next(e for e in events if e.type == "agent.mcp_tool_result").content[0].text == "9"
    assert events[-1].stop_reason.type == "end_turn"  # never handed to the client


def test_another_workspaces_credential_is_never_used(sdk, model, server, env, live_server, other_api_key):
    import anthropic

    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    theirs = other.beta.vaults.create(display_name="theirs")
    other.beta.vaults.credentials.create(
        theirs.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": server.url}
    )
    server.accepted.add(TOKEN)
    agent = _agent(sdk, server, toolset=ALLOW)
    model.script([text("No.")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)  # no vault of its own
    sdk.beta.sessions.events.send(session.id, events=[_user("hi")])
    events = _wait_idle(sdk, session.id)
    assert next(e for e in events if e.type == "session.error").error.type == "mcp_authentication_failed_error"
    assert TOKEN not in server.seen_tokens


def _in_process_client(mcp_server, workspace_id: str, session_id: str = "sesn_t"):
    """The worker's own MCP client for a session whose agent offers the server's tools (always
    allowed), as a turn builds it; the server takes an empty token."""
    from sessions.runtime import mcp as runtime_mcp

    mcp_server.accepted.add("")
    snapshot = {
        "mcp_servers": [{"type": "url", "name": "tools", "url": mcp_server.url}],
        "tools": [{"type": "mcp_toolset", "mcp_server_name": "tools", **ALLOW}],
    }
    return runtime_mcp.SessionMcp(
        session_id=session_id, workspace_id=workspace_id, agent_snapshot=snapshot, vault_ids=[]
    )


def test_mcp_connections_and_calls_are_bounded_per_workspace(settings, mcp_server, api_key, other_api_key):
    """In-process (the worker's own code, against the real server): with one connection allowed
    per workspace, a second session of the workspace gets mcp_connection_failed_error while the
    first holds it; another workspace is not affected; closing gives the slot back."""
    from sessions.runtime import mcp as runtime_mcp

    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    settings.MANGO_WORKSPACE_MAX_MCP_CONNECTIONS = 1
    settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS = 1
    mine, theirs = api_key.workspace.id, other_api_key.workspace.id
    first, second, other = (
        _in_process_client(mcp_server, mine, "sesn_a"),
        _in_process_client(mcp_server, mine, "sesn_b"),
        _in_process_client(mcp_server, theirs, "sesn_c"),
    )
    try:
        assert first.open() == []
        assert runtime_mcp.CONNECTIONS.held(mine) == 1
        [failure] = second.open()
        assert failure.error_type == "mcp_connection_failed_error" and "limit of MCP connections" in failure.message
        assert other.open() == []  # another workspace has its own bound
        result = first.call(server="tools", tool="add", arguments={"a": 20, "b": 22})
        assert result.content == [{"type": "text", "text": "42"}] and not result.is_error
        assert runtime_mcp.CALLS.held(mine) == 0  # the call's slot is back
        first.close()
        assert runtime_mcp.CONNECTIONS.held(mine) == 0
        assert second.open() == []
    finally:
        for each in (first, second, other):
            each.close()
    assert runtime_mcp.CONNECTIONS.held(mine) == 0 and runtime_mcp.CONNECTIONS.held(theirs) == 0


def test_a_call_that_times_out_leaves_the_connection_usable(settings, mcp_server, api_key):
    """In-process, against the real server: the call's timeout is the SDK's, per request; the
    HTTP read under it waits longer, so a slow tool ends its own call and never the transport
    (a read timeout equal to the call's raced it and lost the connection under load)."""
    from sessions.runtime import mcp as runtime_mcp

    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    settings.MANGO_MCP_CALL_TIMEOUT_SECONDS = 1
    settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS = 5
    client = _in_process_client(mcp_server, api_key.workspace.id)
    try:
        assert client.open() == []
        for _ in range(3):
            result = client.call(server="tools", tool="slow", arguments={"seconds": 3})
            assert result.is_error and "timed out after 1 s" in result.content[0]["text"]
            assert client.call(server="tools", tool="add", arguments={"a": 2, "b": 3}).content[0]["text"] == "5"
    finally:
        client.close()
    assert runtime_mcp.CONNECTIONS.held(api_key.workspace.id) == 0


def test_a_trickling_or_oversized_reply_cannot_hold_the_worker(settings, mcp_server, api_key):
    """In-process, against the real server: a reply trickled a byte at a time (each read well
    inside its timeout) ends with the call's timeout; a reply over MANGO_OUTBOUND_RESPONSE_MAX_BYTES
    is not read past it and the call is mcp_connection_failed_error."""
    from sessions.runtime import mcp as runtime_mcp

    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    settings.MANGO_MCP_CALL_TIMEOUT_SECONDS = 2
    settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS = 5
    settings.MANGO_MCP_RESULT_MAX_BYTES = RESULT_MAX
    settings.MANGO_OUTBOUND_RESPONSE_MAX_BYTES = 64 * 1024
    client = _in_process_client(mcp_server, api_key.workspace.id)
    try:
        assert client.open() == []
        mcp_server.trickle = 0.3
        started = time.monotonic()
        result = client.call(server="tools", tool="trickle", arguments={})
        assert result.is_error and "timed out after 2 s" in result.content[0]["text"]
        assert time.monotonic() - started < 2 + 5 + 1  # the call's timeout, and _run's margin at most
        mcp_server.trickle = 0

        # Within the result limit: a plain result. Past the response limit: the connection fails.
        assert client.call(server="tools", tool="big", arguments={"size": 100}).content[0]["text"] == "x" * 100
        started = time.monotonic()
        with pytest.raises(runtime_mcp.McpFailure) as failure:
            client.call(server="tools", tool="big", arguments={"size": 200_000})
        assert failure.value.error_type == "mcp_connection_failed_error"
        assert time.monotonic() - started < 2  # at once, not at the call's timeout
    finally:
        mcp_server.trickle = 0
        client.close()
    assert runtime_mcp.CONNECTIONS.held(api_key.workspace.id) == 0
