"""The API key lifecycle in the admin: create (the raw key shown once), revoke as an action,
optional expiry, last use; and the constraint that makes a key without a hash impossible."""

import re
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from core.models import ApiKey, Workspace, hash_api_key
from core.services import api_key_create

pytestmark = pytest.mark.django_db


def _authenticates(raw_key: str) -> bool:
    status = Client().get("/v1/files", headers={"authorization": f"Bearer {raw_key}"}).status_code
    assert status in (200, 401), status
    return status == 200


def test_a_key_without_a_sha256_hash_cannot_exist():
    workspace = Workspace.objects.create(name="hashless")
    for bad in ("", "x" * 64, "ABCDEF" + "0" * 58):
        with pytest.raises(IntegrityError), transaction.atomic():
            ApiKey.objects.create(workspace=workspace, key_hash=bad, key_hint="sk-mango-xxxx")
    assert not ApiKey.objects.filter(workspace=workspace).exists()


def test_the_workspace_page_cannot_add_keys_inline(admin_client):
    workspace = Workspace.objects.create(name="inline")
    page = admin_client.get(f"/admin/core/workspace/{workspace.pk}/change/").content.decode()
    assert 'name="api_keys-MAX_NUM_FORMS" value="0"' in page  # the inline offers no new rows
    assert f"/admin/core/apikey/add/?workspace={workspace.pk}" in page
    # The old bug: posting an inline row saved a key with an empty hash. The inline takes no rows now.
    response = admin_client.post(
        f"/admin/core/workspace/{workspace.pk}/change/",
        {
            "name": "inline",
            "api_keys-TOTAL_FORMS": "2",
            "api_keys-INITIAL_FORMS": "0",
            "api_keys-0-name": "typed in",
            "api_keys-1-name": "second",
        },
    )
    assert response.status_code in (200, 302)
    assert not ApiKey.objects.filter(workspace=workspace).exists()


def test_create_shows_the_key_once_and_it_works(admin_client, s3_bucket):
    workspace = Workspace.objects.create(name="created-in-admin")
    expiry = timezone.now() + timedelta(days=30)
    response = admin_client.post(
        "/admin/core/apikey/add/",
        {
            "workspace": workspace.pk,
            "name": "ci",
            "expires_at_0": expiry.strftime("%Y-%m-%d"),
            "expires_at_1": "12:00:00",
        },
    )
    assert response.status_code == 200, response.content[:2000]
    assert "no-store" in response["Cache-Control"]
    raw_key = re.search(r'<pre id="raw-key"[^>]*>(sk-mango-[^<]+)</pre>', response.content.decode()).group(1)
    row = ApiKey.objects.get(workspace=workspace)
    assert row.key_hash == hash_api_key(raw_key) and row.name == "ci" and row.expires_at is not None
    assert raw_key not in admin_client.get(f"/admin/core/apikey/{row.pk}/change/").content.decode()
    assert raw_key not in admin_client.get("/admin/core/apikey/").content.decode()
    assert row.last_used_at is None
    assert _authenticates(raw_key)
    row.refresh_from_db()
    assert row.last_used_at is not None
    assert "active" in admin_client.get("/admin/core/apikey/?status=active").content.decode()


def test_revoke_action(admin_client, s3_bucket):
    row, raw_key = api_key_create(workspace_name="revoking")
    _, kept_raw = api_key_create(workspace_name="revoking")
    assert _authenticates(raw_key)
    response = admin_client.post(
        "/admin/core/apikey/", {"action": "revoke_keys", "_selected_action": [row.pk]}, follow=True
    )
    assert "Revoked 1 API key(s)." in response.content.decode()
    row.refresh_from_db()
    assert row.revoked_at is not None and row.status() == "revoked"
    assert not _authenticates(raw_key)
    assert _authenticates(kept_raw)
    # Revoking again changes nothing; keys are revoked, never deleted.
    admin_client.post("/admin/core/apikey/", {"action": "revoke_keys", "_selected_action": [row.pk]})
    assert ApiKey.objects.filter(pk=row.pk).exists()
    assert b"delete_selected" not in admin_client.get("/admin/core/apikey/").content


def test_an_expired_key_no_longer_authenticates(s3_bucket):
    row, raw_key = api_key_create(workspace_name="expiring", expires_at=timezone.now() + timedelta(hours=1))
    assert _authenticates(raw_key)
    ApiKey.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not _authenticates(raw_key)
    row.refresh_from_db()
    assert row.status() == "expired"
