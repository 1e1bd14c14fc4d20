"""Objects that are not Files (skill files now, sandbox checkpoints next): written through an
upload intent like a File, read through files, deleted with their owner, and known to the orphan
scan. Everything against the real bucket and database; the crash tests kill a real process."""

import io

import pytest
from django.core.management import call_command
from django.db import transaction

from files import reconcile, selectors, services, storage
from files.exceptions import StoredObjectMissing
from files.models import File, OwnedObject, StorageIntent, owned_key_prefix
from tests.files.conftest import make_file

pytestmark = pytest.mark.django_db(transaction=True)

KIND = OwnedObject.OwnerKind.SKILL_VERSION


def owned_keys(workspace_id: str) -> dict[str, int]:
    prefix = storage.workspace_prefix(workspace_id, prefix=owned_key_prefix(KIND))
    return {item["key"]: item["size"] for item in storage.list_objects(prefix=prefix)}


def write(workspace, data: bytes, owner_id: str = "17") -> OwnedObject:
    return services.owned_object_write(
        workspace=workspace, owner_kind=KIND, owner_id=owner_id, chunks=[data], max_bytes=len(data)
    )


def read(owned: OwnedObject, owner_id: str | None = None) -> bytes:
    chunks = selectors.owned_object_stream(
        owner_kind=owned.owner_kind, owner_id=owner_id or owned.owner_id, object_key=owned.object_key
    )
    return b"".join(chunks)


def test_a_write_is_intent_backed_under_its_kind_prefix_and_reads_back(workspace):
    data = b"owned bytes " * 1000
    owned = write(workspace, data)
    assert owned.object_key.startswith(f"skill_version/{workspace.id}/")
    assert owned.size_bytes == len(data) and owned.state == OwnedObject.State.READY
    assert owned_keys(workspace.id) == {owned.object_key: len(data)}
    intent = StorageIntent.objects.get(object_key=owned.object_key)
    assert (intent.kind, intent.state, intent.file_id) == ("upload", "committed", None)
    assert read(owned) == data


def test_a_read_needs_the_owner_and_a_lost_object_is_object_missing(workspace):
    owned = write(workspace, b"mine")
    with pytest.raises(StoredObjectMissing):
        read(owned, owner_id="someone-else")
    storage.delete_object(key=owned.object_key)
    with pytest.raises(StoredObjectMissing) as missing:
        read(owned)
    assert missing.value.status == 404 and missing.value.details["error_code"] == "object_missing"


def test_an_unknown_owner_kind_is_refused_before_anything_is_stored(workspace):
    with pytest.raises(ValueError, match="checkpoint_of_nothing"):
        services.owned_object_write(
            workspace=workspace, owner_kind="checkpoint_of_nothing", owner_id="1", chunks=[b"x"], max_bytes=1
        )
    assert not StorageIntent.objects.exists() and not OwnedObject.objects.exists()


def test_a_write_over_its_limit_leaves_nothing(workspace):
    from core.errors import RequestTooLarge

    with pytest.raises(RequestTooLarge):
        services.owned_object_write(workspace=workspace, owner_kind=KIND, owner_id="1", chunks=[b"xx"], max_bytes=1)
    assert owned_keys(workspace.id) == {} and not OwnedObject.objects.exists()
    assert StorageIntent.objects.get().state == StorageIntent.State.ROLLED_BACK


def test_delete_goes_with_the_owners_transaction(workspace):
    kept, doomed, doomed_too = write(workspace, b"a", "1"), write(workspace, b"b", "2"), write(workspace, b"c", "2")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert services.owned_objects_delete(owner_kind=KIND, owner_ids=["2"]) == 2
        raise RuntimeError("the owner's transaction rolls back")
    assert set(owned_keys(workspace.id)) == {kept.object_key, doomed.object_key, doomed_too.object_key}
    assert OwnedObject.objects.filter(state=OwnedObject.State.READY).count() == 3
    assert not StorageIntent.objects.filter(kind=StorageIntent.Kind.DELETE).exists()

    with transaction.atomic():
        services.owned_objects_delete(owner_kind=KIND, owner_ids=["2"])
        # Hidden at once, removed only after the commit.
        assert set(owned_keys(workspace.id)) == {kept.object_key, doomed.object_key, doomed_too.object_key}
        with pytest.raises(StoredObjectMissing):
            read(doomed)
    assert set(owned_keys(workspace.id)) == {kept.object_key}
    assert list(OwnedObject.objects.values_list("pk", flat=True)) == [kept.pk]
    deletes = StorageIntent.objects.filter(kind=StorageIntent.Kind.DELETE)
    assert sorted(deletes.values_list("state", flat=True)) == ["committed", "committed"]


def test_the_orphan_scan_knows_every_owner(workspace):
    file = make_file(workspace, b"a file")
    owned = write(workspace, b"an owned object")
    legacy = storage.new_object_key(workspace_id=workspace.id)  # a skill file stored before owned objects
    storage.put_object(key=legacy, body=b"legacy", content_type="application/octet-stream")
    OwnedObject.objects.create(
        workspace=workspace, owner_kind=KIND, owner_id="9", object_key=legacy, size_bytes=6, sha256=""
    )
    orphans = [
        storage.new_object_key(workspace_id=workspace.id),
        storage.new_object_key(workspace_id=workspace.id, prefix=owned_key_prefix(KIND)),
    ]
    for key in orphans:
        storage.put_object(key=key, body=b"nobody's", content_type="application/octet-stream")

    expected = sorted(f"delete orphan object {key}" for key in orphans)
    dry = reconcile.reconcile(grace_seconds=0, scan_orphans=True, dry_run=True)
    # The bucket is shared with earlier tests' workspaces: this one's actions are the test's.
    assert sorted(action for action in dry.actions if workspace.id in action) == expected
    out = io.StringIO()
    call_command("reconcile_files", "--scan-orphans", "--grace-seconds", "0", stdout=out)
    assert sorted(line for line in out.getvalue().splitlines() if workspace.id in line) == expected
    for key in orphans:
        assert storage.head_object(key=key) is None
    for key in (file.object_key, owned.object_key, legacy):
        assert storage.head_object(key=key) is not None
    assert read(owned) == b"an owned object"
    assert File.objects.filter(pk=file.pk).exists()


def test_reconciliation_keeps_an_owned_object_whose_intent_was_left_open(workspace):
    """Defensive, as for Files: an open upload intent whose key has a row is closed, not undone."""
    owned = write(workspace, b"committed")
    StorageIntent.objects.filter(object_key=owned.object_key).update(state="open", closed_at=None, owner=None)
    report = reconcile.reconcile(grace_seconds=0)
    assert report.uploads_already_committed == 1 and report.uploads_rolled_back == 0
    assert read(owned) == b"committed"
