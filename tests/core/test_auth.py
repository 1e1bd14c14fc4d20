from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from core.models import ApiKey

pytestmark = pytest.mark.django_db


def _get(client: Client, **headers):
    # /v1/files is the simplest authenticated route every build has.
    return client.get("/v1/files", headers=headers)


def test_missing_key_is_401_envelope():
    response = _get(Client())
    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    assert "API key" in body["error"]["message"]
    assert response["request-id"].startswith("req_")
    assert body["request_id"] == response["request-id"]


def test_wrong_key_is_401():
    response = _get(Client(), authorization="Bearer sk-mango-not-a-key")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("style", ["bearer", "x-api-key"])
def test_both_header_styles_authenticate(api_key, style, s3_bucket):
    headers = {"authorization": f"Bearer {api_key}"} if style == "bearer" else {"x-api-key": str(api_key)}
    response = _get(Client(), **headers)
    assert response.status_code == 200, response.content
    assert response.json()["data"] == []


def test_workspace_header_must_match(api_key, other_api_key, s3_bucket):
    ok = _get(Client(), **{"x-api-key": str(api_key), "anthropic-workspace-id": api_key.workspace.id})
    assert ok.status_code == 200
    by_name = _get(Client(), **{"x-api-key": str(api_key), "anthropic-workspace-id": "alpha"})
    assert by_name.status_code == 200
    mismatch = _get(Client(), **{"x-api-key": str(api_key), "anthropic-workspace-id": other_api_key.workspace.id})
    assert mismatch.status_code == 401
    assert "anthropic-workspace-id" in mismatch.json()["error"]["message"]


def test_revoked_key_is_401(api_key):
    ApiKey.objects.filter(pk=api_key.row.pk).update(revoked_at="2026-01-01T00:00:00Z")
    assert _get(Client(), authorization=f"Bearer {api_key}").status_code == 401


def test_an_expired_key_is_401_and_a_key_before_its_expiry_authenticates(api_key, s3_bucket):
    now = timezone.now()
    ApiKey.objects.filter(pk=api_key.row.pk).update(expires_at=now + timedelta(hours=1), last_used_at=None)
    assert _get(Client(), authorization=f"Bearer {api_key}").status_code == 200
    assert ApiKey.objects.get(pk=api_key.row.pk).last_used_at >= now  # bookkeeping still written
    ApiKey.objects.filter(pk=api_key.row.pk).update(expires_at=now - timedelta(seconds=1))
    assert _get(Client(), authorization=f"Bearer {api_key}").status_code == 401


def test_keys_are_stored_hashed(api_key):
    row = ApiKey.objects.get(pk=api_key.row.pk)
    assert str(api_key) not in (row.key_hash, row.key_hint)
    assert len(row.key_hash) == 64


def test_a_credential_lookup_is_one_statement_with_its_workspace(api_key):
    """core.lookups.joined_row, as the credential lookups use it: the row and its workspace in one
    statement (nothing more when the workspace is read), every field as the ORM loads it; None
    when nothing matches."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core.lookups import joined_row

    expected = ApiKey.objects.select_related("workspace").get(pk=api_key.row.pk)
    with CaptureQueriesContext(connection) as queries:
        found = joined_row(ApiKey, joins=("workspace",), where="t.id = %s", params=[api_key.row.pk])
        workspace = found.workspace
    assert len(queries.captured_queries) == 1
    fields = [f.attname for f in ApiKey._meta.concrete_fields]
    assert [getattr(found, f) for f in fields] == [getattr(expected, f) for f in fields]
    assert (workspace.pk, workspace.name, workspace.created_at) == (
        expected.workspace.pk,
        expected.workspace.name,
        expected.workspace.created_at,
    )
    assert not found._state.adding and found._state.db == "default"
    assert joined_row(ApiKey, joins=("workspace",), where="t.id = %s", params=["no-such-key"]) is None
