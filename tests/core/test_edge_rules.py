"""The edge rules hold on every surface, from one place each (core.api.require_beta,
core.errors.api_error_for): in strict mode a request without its beta is refused with the same
message on the REST routes of every app and on the event stream; every 401 carries the
`WWW-Authenticate: Bearer` challenge; every answer has its request id."""

import pytest
from django.test import Client, override_settings

BETA_ROUTES = [
    ("/v1/files", "files-api-2025-04-14"),
    ("/v1/agents", "managed-agents-2026-04-01"),
    ("/v1/environments", "managed-agents-2026-04-01"),
    ("/v1/sessions", "managed-agents-2026-04-01"),
    ("/v1/vaults", "managed-agents-2026-04-01"),
    ("/v1/skills", "skills-2025-10-02"),
]


@pytest.mark.django_db
@override_settings(MANGO_STRICT=True)
@pytest.mark.parametrize(("path", "beta"), BETA_ROUTES)
def test_strict_mode_refuses_a_request_without_its_beta_the_same_way_everywhere(api_key, path, beta, settings):
    client = Client(headers={"authorization": f"Bearer {api_key}"})
    refused = client.get(path)
    assert refused.status_code == 400
    body = refused.json()
    assert body["error"]["message"] == (
        f"Missing required header: anthropic-beta must include {beta!r} (strict mode is on)."
    )
    assert body["request_id"] == refused["request-id"]
    assert client.get(path, headers={"anthropic-beta": f"other-beta,{beta}"}).status_code == 200


@pytest.mark.django_db
@override_settings(MANGO_STRICT=True)
def test_memory_takes_either_of_its_two_betas(api_key, settings):
    client = Client(headers={"authorization": f"Bearer {api_key}"})
    message = client.get("/v1/memory_stores").json()["error"]["message"]
    assert message == (
        f"Missing required header: anthropic-beta must include {settings.MANGO_MEMORY_BETA!r} or"
        f" {settings.MANGO_AGENTS_BETA!r} (strict mode is on)."
    )
    for beta in (settings.MANGO_MEMORY_BETA, settings.MANGO_AGENTS_BETA):
        assert client.get("/v1/memory_stores", headers={"anthropic-beta": beta}).status_code == 200


@pytest.mark.django_db(transaction=True)
@override_settings(MANGO_STRICT=True)
def test_the_event_stream_applies_the_same_beta_rule(api_key, live_server, settings):
    import httpx

    session_path = "/v1/sessions/sesn_missing/events/stream"
    headers = {"authorization": f"Bearer {api_key}"}
    refused = httpx.get(live_server.url + session_path, headers=headers, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        f"Missing required header: anthropic-beta must include {settings.MANGO_AGENTS_BETA!r} (strict mode is on)."
    )
    assert refused.json()["request_id"] == refused.headers["request-id"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path",
    ["/v1/files", "/v1/agents", "/v1/memory_stores", "/v1/skills", "/v1/sessions/sesn_x/events/stream"],
)
def test_every_401_carries_the_bearer_challenge(path, live_server):
    import httpx

    for headers in ({}, {"authorization": "Bearer sk-mango-wrong"}):
        answer = httpx.get(live_server.url + path, headers=headers, timeout=10)
        assert answer.status_code == 401, (path, headers, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["request_id"] == answer.headers["request-id"]
