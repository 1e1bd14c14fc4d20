"""Vaults and credentials: the official SDK drives the 13 methods (strict response validation);
secrets are write-only (in no response, log line or pg_dump of the database) and encrypted at
rest; environment_variable credentials are kept for the egress proxy; another workspace's ids
are 404s; private MCP servers and token endpoints are refused unless allowed; sessions take
`vault_ids` (unknown or foreign: 400);
mcp_oauth_validate probes a real MCP server and refreshes at a real token endpoint."""

import io
import json
import logging
import subprocess
import time
from datetime import UTC, datetime, timedelta

import anthropic
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from core import oauth, secrets
from sessions.models import SessionResource
from tests.factories import make_session
from tests.mcp_server import McpTestServer
from vaults.models import VaultCredential

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "sk-static-bearer-PLAINTEXT-1f9a"
ACCESS = "oauth-access-PLAINTEXT-77c2"
REFRESH = "oauth-refresh-PLAINTEXT-a0e1"
CLIENT_SECRET = "oauth-client-secret-PLAINTEXT-5b3d"
ALL_SECRETS = (TOKEN, ACCESS, REFRESH, CLIENT_SECRET)
REPOSITORY_TOKEN = "ghp-repository-PLAINTEXT-c4d8"


@pytest.fixture(scope="module")
def mcp_server():
    server = McpTestServer().start()
    yield server
    server.stop()


@pytest.fixture
def allowed(settings, mcp_server):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    mcp_server.accepted.clear()
    mcp_server.token_requests.clear()
    mcp_server.issue = {}
    mcp_server.token_status = 200
    mcp_server.token_body = None
    mcp_server.refusal = b"unauthorized"
    mcp_server.trickle = 0.0
    yield mcp_server
    mcp_server.token_body = None
    mcp_server.refusal = b"unauthorized"
    mcp_server.trickle = 0.0


def pg_dump() -> str:
    name = connection.settings_dict["NAME"]
    host = connection.settings_dict.get("HOST") or "127.0.0.1"
    user = connection.settings_dict.get("USER") or "postgres"
    port = str(connection.settings_dict.get("PORT") or 5432)
    return subprocess.run(
        ["pg_dump", "-h", host, "-p", port, "-U", user, "--data-only", name],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def capture_every_log_line(caplog) -> None:
    """Every logger at DEBUG, httpx2's too (at WARNING by default, core/logging.py: its INFO line
    names each outbound URL), so that a secret in any line a setting could turn on is seen."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx2")


def server_log(caplog) -> str:
    """Every captured log line but the SDK client's own (its debug log echoes the request body it sent)."""
    return "\n".join(record.getMessage() for record in caplog.records if not record.name.startswith("anthropic"))


def raw(obj) -> str:
    return json.dumps(obj.model_dump(mode="json"))


def oauth_auth(server, *, auth_type="client_secret_basic", expires_in=3600) -> dict:
    endpoint_auth = {"type": auth_type}
    if auth_type != "none":
        endpoint_auth["client_secret"] = CLIENT_SECRET
    return {
        "type": "mcp_oauth",
        "mcp_server_url": server.url,
        "access_token": ACCESS,
        "expires_at": datetime.now(UTC) + timedelta(seconds=expires_in),
        "refresh": {
            "client_id": "mango-client",
            "refresh_token": REFRESH,
            "token_endpoint": server.token_url,
            "token_endpoint_auth": endpoint_auth,
            "scope": "tools",
        },
    }


def test_the_sdk_drives_the_vault_methods(sdk):
    vaults = sdk.beta.vaults
    vault = vaults.create(display_name="Team tools", metadata={"team": "a"})
    assert vault.type == "vault" and vault.id.startswith("vlt_") and vault.archived_at is None
    assert vault.display_name == "Team tools" and vault.metadata == {"team": "a"}
    bare = vaults.create(display_name="bare")
    assert bare.metadata == {}
    assert vaults.retrieve(vault.id).display_name == "Team tools"
    updated = vaults.update(vault.id, display_name="Tools", metadata={"team": None, "env": "prod"})
    assert updated.display_name == "Tools" and updated.metadata == {"env": "prod"}
    assert updated.updated_at > vault.updated_at
    assert [v.id for v in vaults.list()] == [bare.id, vault.id]
    assert [v.id for v in vaults.list(limit=1)] == [bare.id, vault.id]  # auto-paginated
    archived = vaults.archive(bare.id)
    assert archived.archived_at is not None
    assert [v.id for v in vaults.list()] == [vault.id]
    assert {v.id for v in vaults.list(include_archived=True)} == {vault.id, bare.id}
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        vaults.update(bare.id, display_name="x")
    deleted = vaults.delete(bare.id)
    assert deleted.type == "vault_deleted" and deleted.id == bare.id
    with pytest.raises(anthropic.NotFoundError):
        vaults.retrieve(bare.id)


def test_the_sdk_drives_the_credential_methods_and_no_secret_comes_back(sdk, allowed, caplog):
    capture_every_log_line(caplog)
    vault = sdk.beta.vaults.create(display_name="v")
    credentials = sdk.beta.vaults.credentials
    bearer = credentials.create(
        vault.id,
        auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url},
        display_name="Static",
        metadata={"k": "v"},
    )
    assert bearer.type == "vault_credential" and bearer.id.startswith("vcrd_") and bearer.vault_id == vault.id
    assert bearer.auth.type == "static_bearer" and bearer.auth.mcp_server_url == allowed.url
    assert bearer.display_name == "Static" and bearer.metadata == {"k": "v"}

    other_url = allowed.url.replace("/mcp", "/other")
    oauth = credentials.create(vault.id, auth=oauth_auth(allowed) | {"mcp_server_url": other_url})
    assert oauth.auth.type == "mcp_oauth" and oauth.auth.expires_at is not None
    assert oauth.auth.refresh.client_id == "mango-client" and oauth.auth.refresh.scope == "tools"
    assert oauth.auth.refresh.token_endpoint_auth.type == "client_secret_basic"
    assert oauth.display_name is None

    with pytest.raises(anthropic.ConflictError):  # one live credential per server URL in a vault
        credentials.create(vault.id, auth={"type": "static_bearer", "token": "t2", "mcp_server_url": allowed.url})

    seen = [bearer, oauth]
    seen.append(credentials.retrieve(bearer.id, vault_id=vault.id))
    seen.append(credentials.update(bearer.id, vault_id=vault.id, auth={"type": "static_bearer", "token": TOKEN + "2"}))
    seen.append(
        credentials.update(
            oauth.id,
            vault_id=vault.id,
            display_name="OAuth",
            metadata={"a": "b"},
            auth={"type": "mcp_oauth", "refresh": {"scope": "", "token_endpoint_auth": {"type": "client_secret_post"}}},
        )
    )
    assert seen[-1].display_name == "OAuth" and seen[-1].auth.refresh.scope is None
    # The type sent with a new secret does not change the stored one (the SDK's rule).
    assert seen[-1].auth.refresh.token_endpoint_auth.type == "client_secret_basic"
    with pytest.raises(anthropic.BadRequestError, match="type cannot be changed"):
        credentials.update(bearer.id, vault_id=vault.id, auth={"type": "mcp_oauth", "access_token": "x"})
    listed = list(credentials.list(vault.id))
    assert [c.id for c in listed] == [oauth.id, bearer.id]
    seen += listed
    archived = credentials.archive(bearer.id, vault_id=vault.id)
    assert archived.archived_at is not None
    seen.append(archived)
    assert [c.id for c in credentials.list(vault.id)] == [oauth.id]
    assert {c.id for c in credentials.list(vault.id, include_archived=True)} == {oauth.id, bearer.id}
    # The URL is free again once its credential is archived.
    again = credentials.create(vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url})
    seen.append(again)

    # Secrets are stored only as ciphertext, which decrypts to them.
    row = VaultCredential.objects.get(id=oauth.id)
    assert ACCESS not in row.secret and json.loads(secrets.decrypt(row.secret))["access_token"] == ACCESS
    assert "access_token" not in json.dumps(row.auth) and REFRESH not in json.dumps(row.auth)
    assert VaultCredential.objects.get(id=bearer.id).secret == ""  # revoked: the secret is erased

    deleted = credentials.delete(again.id, vault_id=vault.id)
    assert deleted.type == "vault_credential_deleted" and deleted.id == again.id
    with pytest.raises(anthropic.NotFoundError):
        credentials.retrieve(again.id, vault_id=vault.id)

    text = " ".join(raw(item) for item in seen) + server_log(caplog)
    assert "HTTP Request" in server_log(caplog)  # the capture works
    dump = pg_dump()
    for secret in ALL_SECRETS:
        assert secret not in text, "a secret in a response or a log line"
        assert secret not in dump, "a secret in plaintext in the database"


def test_validate_probes_the_mcp_server_and_refreshes_on_401(sdk, allowed, caplog):
    capture_every_log_line(caplog)
    vault = sdk.beta.vaults.create(display_name="v")
    credentials = sdk.beta.vaults.credentials
    credential = credentials.create(vault.id, auth=oauth_auth(allowed))

    allowed.accepted.add(ACCESS)
    valid = credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert valid.type == "vault_credential_validation" and valid.status == "valid"
    assert valid.credential_id == credential.id and valid.vault_id == vault.id
    assert valid.has_refresh_token is True and valid.mcp_probe is None and valid.refresh is None
    assert allowed.seen_tokens[-1] == ACCESS

    # The server stops accepting the token: a 401, then a refresh at the token endpoint.
    allowed.accepted.clear()
    allowed.issue = {"access_token": "fresh-access-1", "refresh_token": "fresh-refresh-1", "expires_in": 3600}
    refreshed = credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert refreshed.status == "unknown" and refreshed.refresh.status == "succeeded"
    assert refreshed.mcp_probe.method == "initialize" and refreshed.mcp_probe.http_response.status_code == 401
    request = allowed.token_requests[-1]
    assert request["grant_type"] == "refresh_token" and request["refresh_token"] == REFRESH
    assert request["_basic"] == f"mango-client:{CLIENT_SECRET}" and "client_secret" not in request
    stored = json.loads(secrets.decrypt(VaultCredential.objects.get(id=credential.id).secret))
    assert stored["access_token"] == "fresh-access-1" and stored["refresh_token"] == "fresh-refresh-1"
    assert credentials.mcp_oauth_validate(credential.id, vault_id=vault.id).status == "valid"

    # A token endpoint that refuses (its answer is reported with the secrets scrubbed).
    allowed.accepted.clear()
    allowed.token_status = 400
    allowed.issue = {"error": "invalid_grant", "echo": "fresh-refresh-1"}
    failed = credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert failed.status == "invalid" and failed.refresh.status == "failed"
    answer = failed.refresh.http_response
    assert answer.status_code == 400 and "invalid_grant" in answer.body and "fresh-refresh-1" not in answer.body

    with pytest.raises(anthropic.BadRequestError, match="not mcp_oauth"):
        bearer = credentials.create(
            vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url + "/b"}
        )
        credentials.mcp_oauth_validate(bearer.id, vault_id=vault.id)
    for secret in (*ALL_SECRETS, "fresh-access-1", "fresh-refresh-1"):
        assert secret not in server_log(caplog)


@pytest.mark.parametrize("auth_type", ["none", "client_secret_post"])
def test_refresh_sends_the_token_endpoint_auth(sdk, allowed, auth_type):
    vault = sdk.beta.vaults.create(display_name="v")
    credential = sdk.beta.vaults.credentials.create(vault.id, auth=oauth_auth(allowed, auth_type=auth_type))
    allowed.issue = {"access_token": "fresh-access-2", "expires_in": 60}
    result = sdk.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert result.refresh.status == "succeeded"
    request = allowed.token_requests[-1]
    assert request["client_id"] == "mango-client" and "_basic" not in request
    assert request.get("client_secret") == (CLIENT_SECRET if auth_type == "client_secret_post" else None)
    stored = json.loads(secrets.decrypt(VaultCredential.objects.get(id=credential.id).secret))
    assert stored["access_token"] == "fresh-access-2" and stored["refresh_token"] == REFRESH  # kept


def test_validate_reads_at_most_a_bounded_part_of_what_the_servers_answer(sdk, allowed):
    """A megabyte from the MCP server's 401 and from the token endpoint: the answers are reported
    truncated, and a token endpoint's 200 that large is a failed refresh, not a token."""
    vault = sdk.beta.vaults.create(display_name="v")
    credentials = sdk.beta.vaults.credentials
    credential = credentials.create(vault.id, auth=oauth_auth(allowed))
    allowed.refusal = b"no " * 400_000
    allowed.token_status = 400
    allowed.token_body = b'{"error": "invalid_grant", "pad": "' + b"x" * 1_000_000 + b'"}'
    result = credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    probe = result.mcp_probe.http_response
    assert probe.status_code == 401 and probe.body_truncated and probe.body.startswith("no no")
    assert result.refresh.status == "failed"
    answer = result.refresh.http_response
    assert answer.status_code == 400 and answer.body_truncated and "invalid_grant" in answer.body

    allowed.token_status = 200
    allowed.token_body = b'{"access_token": "fresh-access-3", "pad": "' + b"x" * 1_000_000 + b'"}'
    result = credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert result.status == "invalid" and result.refresh.status == "failed"
    assert result.refresh.http_response.status_code == 200 and result.refresh.http_response.body_truncated
    stored = json.loads(secrets.decrypt(VaultCredential.objects.get(id=credential.id).secret))
    assert stored["access_token"] == ACCESS  # nothing taken from an answer past the limit


def test_a_trickling_server_cannot_hold_a_refresh_or_a_probe_past_its_timeout(allowed):
    """Each byte arrives well inside the read timeout; the exchange still ends at its timeout."""
    allowed.trickle = 0.2
    allowed.token_body = b'{"access_token": "trickled-access"}'
    started = time.monotonic()
    with pytest.raises(oauth.RefreshUnreachable, match=r"within 1\.5 s"):
        oauth.refresh(
            token_endpoint=allowed.token_url,
            client_id="mango-client",
            refresh_token=REFRESH,
            auth_type="none",
            client_secret=None,
            scope=None,
            resource=None,
            timeout=1.5,
        )
    assert time.monotonic() - started < 3

    allowed.refusal = b"unauthorized, trickled"
    started = time.monotonic()
    with pytest.raises(oauth.RefreshUnreachable, match=r"within 1\.5 s"):
        oauth.mcp_probe(url=allowed.url, access_token="refused-token", timeout=1.5)
    assert time.monotonic() - started < 3


SECRET_VALUE = "env-secret-PLAINTEXT-9d2e"


def test_environment_variable_credentials_through_the_sdk_without_their_value(sdk, caplog):
    """Stored for the egress proxy to substitute (tests/sessions/test_sandbox_image.py shows the
    substitution): shapes as the SDK's, the value in no response, log line or pg_dump."""
    capture_every_log_line(caplog)
    vault = sdk.beta.vaults.create(display_name="v")
    credentials = sdk.beta.vaults.credentials
    made = credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_KEY",
            "secret_value": SECRET_VALUE,
            "networking": {"type": "limited", "allowed_hosts": ["api.example.com", "*.example.org"]},
            "injection_location": {"header": True, "body": True},
        },
    )
    assert made.auth.type == "environment_variable" and made.auth.secret_name == "API_KEY"
    assert made.auth.networking.type == "limited"
    assert made.auth.networking.allowed_hosts == ["api.example.com", "*.example.org"]
    assert made.auth.injection_location.header is True and made.auth.injection_location.body is True
    unrestricted = credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "OTHER",
            "secret_value": SECRET_VALUE,
            "networking": {"type": "unrestricted"},
        },
    )
    assert unrestricted.auth.networking.type == "unrestricted"
    assert (unrestricted.auth.injection_location.header, unrestricted.auth.injection_location.body) == (True, False)
    updated = credentials.update(
        made.id,
        vault_id=vault.id,
        auth={"type": "environment_variable", "secret_value": "rotated-" + SECRET_VALUE,
              "networking": {"type": "unrestricted"}, "injection_location": {"body": False}},
    )  # fmt: skip
    assert updated.auth.networking.type == "unrestricted" and updated.auth.injection_location.body is False
    assert updated.auth.secret_name == "API_KEY"
    listed = list(credentials.list(vault.id))
    assert {c.id for c in listed} == {made.id, unrestricted.id}
    seen = json.dumps([raw(c) for c in [made, unrestricted, updated, credentials.retrieve(made.id, vault_id=vault.id)]])
    assert SECRET_VALUE not in seen and SECRET_VALUE not in server_log(caplog)
    assert SECRET_VALUE not in pg_dump()
    row = VaultCredential.objects.get(id=made.id)
    assert json.loads(secrets.decrypt(row.secret)) == {"secret_value": "rotated-" + SECRET_VALUE}
    # One live credential per variable in a vault; the sandbox's own variables and bad hosts are 400s.
    with pytest.raises(anthropic.ConflictError):
        credentials.create(
            vault.id,
            auth={"type": "environment_variable", "secret_name": "API_KEY", "secret_value": "x",
                  "networking": {"type": "unrestricted"}},
        )  # fmt: skip
    for auth, named in (
        ({"secret_name": "HTTPS_PROXY"}, "auth.secret_name"),
        ({"secret_name": "NOT-A-NAME"}, "secret_name"),
        ({"networking": {"type": "limited", "allowed_hosts": ["https://api.example.com/x"]}}, "allowed_hosts"),
        ({"networking": {"type": "limited", "allowed_hosts": ["api.example.com:8443"]}}, "allowed_hosts"),
        ({"networking": {"type": "limited", "allowed_hosts": []}}, "allowed_hosts"),
        ({"networking": {"type": "unrestricted", "allowed_hosts": ["api.example.com"]}}, "allowed_hosts"),
        ({"injection_location": {"header": False, "body": False}}, "auth.injection_location"),
    ):
        body = {"type": "environment_variable", "secret_name": "FINE", "secret_value": SECRET_VALUE,
                "networking": {"type": "unrestricted"}} | auth  # fmt: skip
        with pytest.raises(anthropic.BadRequestError) as refused:
            credentials.create(vault.id, auth=body)
        assert named in refused.value.message and SECRET_VALUE not in json.dumps(refused.value.body), auth
    # An update may not leave the secret nowhere to go either (unrestricted substitutes in headers only).
    with pytest.raises(anthropic.BadRequestError, match=r"auth\.injection_location"):
        credentials.update(
            unrestricted.id,
            vault_id=vault.id,
            auth={"type": "environment_variable", "injection_location": {"header": False}},
        )


def test_private_servers_and_token_endpoints_are_refused_unless_allowed(sdk, settings, mcp_server):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    vault = sdk.beta.vaults.create(display_name="v")
    for url in (mcp_server.url, "http://169.254.169.254/mcp", "http://10.0.0.7/mcp"):
        with pytest.raises(anthropic.BadRequestError, match="private address") as refused:
            sdk.beta.vaults.credentials.create(
                vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": url}
            )
        assert TOKEN not in json.dumps(refused.value.body)
    # A name that resolves to a private address: refused without the server's DNS answer.
    named = mcp_server.url.replace("127.0.0.1", "localhost")
    with pytest.raises(anthropic.BadRequestError, match="private address") as refused:
        sdk.beta.vaults.credentials.create(
            vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": named}
        )
    assert "127.0.0.1" not in refused.value.message and "::1" not in refused.value.message
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [mcp_server.host]
    auth = oauth_auth(mcp_server) | {}
    auth["refresh"] = dict(auth["refresh"], token_endpoint="http://192.168.1.1/token")
    with pytest.raises(anthropic.BadRequestError, match="token_endpoint"):
        sdk.beta.vaults.credentials.create(vault.id, auth=auth)
    assert not VaultCredential.objects.exists()


def test_another_workspace_sees_no_vault_and_no_credential(sdk, live_server, other_api_key, allowed):
    vault = sdk.beta.vaults.create(display_name="mine")
    credential = sdk.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url}
    )
    other = anthropic.Anthropic(
        base_url=live_server.url, api_key=str(other_api_key), max_retries=0, _strict_response_validation=True
    )
    assert list(other.beta.vaults.list()) == []
    calls = [
        lambda: other.beta.vaults.retrieve(vault.id),
        lambda: other.beta.vaults.update(vault.id, display_name="x"),
        lambda: other.beta.vaults.archive(vault.id),
        lambda: other.beta.vaults.delete(vault.id),
        lambda: other.beta.vaults.credentials.list(vault.id),
        lambda: other.beta.vaults.credentials.create(
            vault.id, auth={"type": "static_bearer", "token": "t", "mcp_server_url": allowed.url + "/x"}
        ),
        lambda: other.beta.vaults.credentials.retrieve(credential.id, vault_id=vault.id),
        lambda: other.beta.vaults.credentials.update(credential.id, vault_id=vault.id, display_name="x"),
        lambda: other.beta.vaults.credentials.archive(credential.id, vault_id=vault.id),
        lambda: other.beta.vaults.credentials.delete(credential.id, vault_id=vault.id),
        lambda: other.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id),
    ]
    for call in calls:
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert sdk.beta.vaults.credentials.retrieve(credential.id, vault_id=vault.id).archived_at is None


def test_sessions_take_vault_ids_and_refuse_unknown_or_foreign_ones(sdk, live_server, other_api_key):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    environment = sdk.beta.environments.create(name="e")
    vault = sdk.beta.vaults.create(display_name="v")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, vault_ids=[vault.id])
    assert session.vault_ids == [vault.id]
    assert sdk.beta.sessions.retrieve(session.id).vault_ids == [vault.id]

    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    foreign = other.beta.vaults.create(display_name="theirs")
    for vault_ids in (["vlt_missing"], [foreign.id]):
        with pytest.raises(anthropic.BadRequestError, match="vault_ids"):
            sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, vault_ids=vault_ids)
    sdk.beta.vaults.archive(vault.id)
    with pytest.raises(anthropic.BadRequestError, match="vault_ids"):
        sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, vault_ids=[vault.id])


def test_rotate_vault_secrets_reencrypts_under_the_first_key(sdk, allowed, settings):
    """Vault credentials and repository tokens alike: after the command the old key can go."""
    old_key = settings.MANGO_VAULT_KEY[0]
    vault = sdk.beta.vaults.create(display_name="v")
    credential = sdk.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url}
    )
    session = make_session(VaultCredential.objects.get(id=credential.id).vault.workspace)
    repository = SessionResource.objects.create(
        session=session,
        type=SessionResource.Type.GITHUB_REPOSITORY,
        url="https://git.example.com/team/app.git",
        mount_path="/workspace/app",
        authorization_token=secrets.encrypt(REPOSITORY_TOKEN),
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    before = VaultCredential.objects.get(id=credential.id).secret, repository.authorization_token
    new_key = secrets.generate_key()
    settings.MANGO_VAULT_KEY = [new_key, old_key]
    out = io.StringIO()
    call_command("rotate_vault_secrets", stdout=out)
    assert "Re-encrypted 2 secret(s)" in out.getvalue()
    repository.refresh_from_db()
    after = VaultCredential.objects.get(id=credential.id).secret, repository.authorization_token
    assert after[0] != before[0] and after[1] != before[1]
    settings.MANGO_VAULT_KEY = [new_key]  # the old key dropped: the secrets still read
    assert json.loads(secrets.decrypt(after[0])) == {"token": TOKEN}
    assert secrets.decrypt(after[1]) == REPOSITORY_TOKEN
    settings.MANGO_VAULT_KEY = [old_key]
    for sealed in after:
        with pytest.raises(secrets.SecretsUnavailable):
            secrets.decrypt(sealed)
    # A server whose key cannot read what is stored says so (503 naming the setting), not a 500.
    with pytest.raises(anthropic.InternalServerError) as unreadable:
        sdk.with_options(max_retries=0).beta.vaults.credentials.update(
            credential.id, vault_id=vault.id, auth={"type": "static_bearer", "token": "new"}
        )
    assert unreadable.value.status_code == 503 and "MANGO_VAULT_KEY" in unreadable.value.message


def test_admin_lists_vaults_and_credentials_without_secrets_and_revokes(admin_client, sdk, allowed):
    vault = sdk.beta.vaults.create(display_name="Team vault")
    credential = sdk.beta.vaults.credentials.create(
        vault.id,
        auth={"type": "static_bearer", "token": TOKEN, "mcp_server_url": allowed.url},
        display_name="Docs server",
    )
    pages = [
        admin_client.get("/admin/vaults/vaultcredential/"),
        admin_client.get(f"/admin/vaults/vaultcredential/{credential.id}/change/"),
        admin_client.get("/admin/vaults/vault/"),
        admin_client.get(f"/admin/vaults/vault/{vault.id}/change/"),
    ]
    ciphertext = VaultCredential.objects.get(id=credential.id).secret
    for number, page in enumerate(pages):
        body = page.content.decode()
        assert page.status_code == 200
        assert "Team vault" in body if number == 2 else ("Docs server" in body and allowed.url in body)
        assert TOKEN not in body and ciphertext not in body
    assert "static_bearer" in pages[0].content.decode()

    revoked = admin_client.post(
        "/admin/vaults/vaultcredential/", {"action": "revoke", "_selected_action": [credential.id]}
    )
    assert revoked.status_code == 302
    row = VaultCredential.objects.get(id=credential.id)
    assert row.archived_at is not None and row.secret == ""
    assert sdk.beta.vaults.credentials.retrieve(credential.id, vault_id=vault.id).archived_at is not None
