"""The Files admin: filters, search, read-only detail, delete through the service, and the
intents list with "reconcile now"."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from files import services
from files.models import File, OwnedObject, StorageIntent
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file
from tests.files.test_services import _age, interrupted_put

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client():
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_file_list_filters_search_and_detail(admin_client, workspace):
    top = make_file(workspace, b"a", filename="alpha-report.txt")
    scoped = make_file(workspace, b"b", filename="beta.txt", scope_session_id="sesn_admin", downloadable=True)
    page = admin_client.get("/admin/files/file/").content.decode()
    assert top.id in page and scoped.id in page
    filtered = admin_client.get("/admin/files/file/?scope=session&downloadable__exact=1&state__exact=ready")
    assert scoped.id in filtered.content.decode() and top.id not in filtered.content.decode()
    filtered = admin_client.get(
        f"/admin/files/file/?origin__exact=upload&workspace__id__exact={workspace.id}&scope=top"
    )
    assert top.id in filtered.content.decode() and scoped.id not in filtered.content.decode()
    searched = admin_client.get("/admin/files/file/?q=alpha-report").content.decode()
    assert top.id in searched and scoped.id not in searched
    detail = admin_client.get(f"/admin/files/file/{top.id}/change/")
    assert detail.status_code == 200
    assert top.sha256 in detail.content.decode()
    assert b'name="filename"' not in detail.content  # read-only: no form inputs
    assert admin_client.get("/admin/files/file/add/").status_code == 403


def test_delete_action_uses_the_service(admin_client, workspace):
    doomed = make_file(workspace, b"x")
    kept = make_file(workspace, b"y")
    response = admin_client.post(
        "/admin/files/file/", {"action": "delete_files", "_selected_action": [doomed.id]}, follow=True
    )
    assert response.status_code == 200
    assert list(File.objects.values_list("id", flat=True)) == [kept.id]
    assert set(bucket_keys(workspace.id)) == {kept.object_key}
    assert StorageIntent.objects.get(kind="delete").state == "committed"
    # The stock bulk delete (which would leak objects) is not offered.
    assert b"delete_selected" not in admin_client.get("/admin/files/file/").content


def test_intents_reconcile_now(admin_client, workspace):
    stale = interrupted_put(workspace)
    _age([stale])
    fresh = interrupted_put(workspace, b"maybe live")
    page = admin_client.get("/admin/files/storageintent/?state__exact=open").content.decode()
    assert stale.object_key in page and fresh.object_key in page
    response = admin_client.post(
        "/admin/files/storageintent/",
        {"action": "reconcile_now", "_selected_action": [stale.pk, fresh.pk]},
        follow=True,
    )
    assert "Finished 1 intent(s)" in response.content.decode()
    assert "1 skipped" in response.content.decode()
    assert StorageIntent.objects.get(pk=stale.pk).state == "rolled_back"
    assert StorageIntent.objects.get(pk=fresh.pk).state == "open"
    assert set(bucket_keys(workspace.id)) == {fresh.object_key}
    StorageIntent.objects.filter(pk=fresh.pk).update(updated_at="2000-01-01T00:00:00Z")
    admin_client.post("/admin/files/storageintent/", {"action": "reconcile_now", "_selected_action": [fresh.pk]})
    assert_store_consistent(workspace.id)


def test_owned_objects_are_listed_read_only(admin_client, workspace):
    owned = services.owned_object_write(
        workspace=workspace,
        owner_kind=OwnedObject.OwnerKind.SKILL_VERSION,
        owner_id="42",
        chunks=[b"skill file"],
        max_bytes=10,
    )
    page = admin_client.get("/admin/files/ownedobject/?owner_kind__exact=skill_version").content.decode()
    assert owned.object_key in page and "skill_version" in page
    assert admin_client.get("/admin/files/ownedobject/?q=42").content.decode().count(owned.object_key) == 1
    assert admin_client.get(f"/admin/files/ownedobject/{owned.pk}/change/").status_code == 200
    assert admin_client.get("/admin/files/ownedobject/add/").status_code == 403
    admin_client.post(f"/admin/files/ownedobject/{owned.pk}/delete/", {"post": "yes"})
    assert OwnedObject.objects.filter(pk=owned.pk).exists()
