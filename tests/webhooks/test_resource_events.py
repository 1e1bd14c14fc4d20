"""agent.*, environment.*, memory_store.*, vault.*, vault_credential.* (refresh_failed included),
deployment.* and deployment_run.*: each change made through the SDK writes its outbox row in its
own transaction (core.signals.resource_changed: the catalogue apps import nothing of webhooks),
and each body, signed as a delivery is, is unwrapped by the SDK into the data class of its type."""

from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from tests.webhooks.conftest import Receiver
from vaults.services import credential_refresh
from webhooks.delivery import signed_headers
from webhooks.models import WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "go"}]}


def _class_name(type: str) -> str:
    resource, change = type.split(".")
    return "BetaWebhook" + "".join(p.title() for p in (*resource.split("_"), *change.split("_"))) + "EventData"


def test_every_resource_type_sent_is_the_sdks_own_shape(api, sdk, settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    secret = api.post("/v1/mango/webhook_endpoints", {"url": "https://hooks.example.invalid/in"},
                      content_type="application/json").json()["secret"]  # fmt: skip
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    sdk.beta.agents.update(agent.id, version=agent.version, name="b")
    environment = sdk.beta.environments.create(name="e", config={"type": "self_hosted"})
    sdk.beta.environments.update(environment.id, name="f")
    deployment = sdk.beta.deployments.create(
        agent=agent.id, environment_id=environment.id, initial_events=[MESSAGE], name="d",
        schedule={"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    )  # fmt: skip
    sdk.beta.deployments.update(deployment.id, name="d2")
    sdk.beta.deployments.pause(deployment.id)
    sdk.beta.deployments.unpause(deployment.id)
    succeeded = sdk.beta.deployments.run(deployment.id)
    sdk.beta.agents.archive(agent.id)
    failed = sdk.beta.deployments.run(deployment.id)  # its agent is archived now
    assert failed.error.type == "agent_archived_error" and failed.session_id is None
    sdk.beta.deployments.archive(deployment.id)
    sdk.beta.environments.archive(environment.id)
    sdk.beta.environments.delete(environment.id)
    store = sdk.beta.memory_stores.create(name="notes")
    sdk.beta.memory_stores.archive(store.id)
    sdk.beta.memory_stores.delete(store.id)
    vault = sdk.beta.vaults.create(display_name="v")
    token_server = Receiver()  # the token endpoint answers 400: the refresh fails
    token_server.status = 400
    try:
        credential = sdk.beta.vaults.credentials.create(
            vault.id,
            auth={
                "type": "mcp_oauth", "mcp_server_url": "https://mcp.example.invalid/mcp", "access_token": "at",
                "expires_at": datetime.now(UTC) + timedelta(seconds=5),
                "refresh": {"client_id": "c", "refresh_token": "rt", "token_endpoint": token_server.url,
                            "token_endpoint_auth": {"type": "none"}},
            },
        )  # fmt: skip
        with pytest.raises(Exception):  # noqa: B017 — RefreshFailed or RefreshUnreachable, both announced
            credential_refresh(credential_id=credential.id)
    finally:
        token_server.stop()
    sdk.beta.vaults.credentials.archive(credential.id, vault_id=vault.id)
    sdk.beta.vaults.credentials.delete(credential.id, vault_id=vault.id)
    sdk.beta.vaults.archive(vault.id)
    sdk.beta.vaults.delete(vault.id)

    client = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")
    seen: dict[str, list[str]] = {}
    for delivery in WebhookDelivery.objects.exclude(event_type__startswith="session.").order_by("created_at", "id"):
        headers = signed_headers(delivery_id=delivery.id, body=delivery.body, secrets=[secret], now=datetime.now(UTC))
        event = client.beta.webhooks.unwrap(delivery.body, headers=headers, key=secret)
        assert type(event.data).__name__ == _class_name(delivery.event_type), delivery.body
        seen.setdefault(event.data.type, []).append(event.data.id)
        if event.data.type.startswith("vault_credential."):
            assert event.data.vault_id == vault.id and event.data.id == credential.id
    assert seen.pop("deployment_run.started") == [succeeded.id, failed.id]
    assert seen.pop("deployment_run.succeeded") == [succeeded.id]
    assert seen.pop("deployment_run.failed") == [failed.id]
    expected = {
        "agent.created": agent.id, "agent.updated": agent.id, "agent.archived": agent.id,
        "environment.created": environment.id, "environment.updated": environment.id,
        "environment.archived": environment.id, "environment.deleted": environment.id,
        "deployment.created": deployment.id, "deployment.updated": deployment.id, "deployment.paused": deployment.id,
        "deployment.unpaused": deployment.id, "deployment.archived": deployment.id,
        "memory_store.created": store.id, "memory_store.archived": store.id, "memory_store.deleted": store.id,
        "vault.created": vault.id, "vault.archived": vault.id, "vault.deleted": vault.id,
        "vault_credential.created": credential.id, "vault_credential.refresh_failed": credential.id,
        "vault_credential.archived": credential.id, "vault_credential.deleted": credential.id,
    }  # fmt: skip
    assert seen == {type: [object_id] for type, object_id in expected.items()}
