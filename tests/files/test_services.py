"""Services, reconciliation and tasks, against the real database and store."""

import hashlib
import threading
import time
from datetime import timedelta

import pytest
from botocore.exceptions import ClientError
from django.core.management import call_command
from django.utils import timezone

from config.celery import app as celery_app
from core.errors import NotFound, RequestTooLarge, ServiceUnavailable
from files import liveness, reconcile, selectors, services, storage, transfers
from files.exceptions import StoredObjectMissing
from files.models import File, StorageIntent
from files.tasks import files_expire, files_reconcile
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file, multipart_uploads

pytestmark = pytest.mark.django_db


def _age(intents, seconds=7200):
    StorageIntent.objects.filter(pk__in=[i.pk for i in intents]).update(
        updated_at=timezone.now() - timedelta(seconds=seconds)
    )


def interrupted_put(workspace, data=b"orphan") -> StorageIntent:
    """What a crash between the object write and the row commit leaves (crash point b)."""
    key = storage.new_object_key(workspace_id=workspace.id)
    intent = StorageIntent.objects.create(kind="upload", workspace=workspace, object_key=key)
    storage.put_object(key=key, body=data, content_type="text/plain")
    return intent


def interrupted_multipart(workspace) -> StorageIntent:
    """What a crash mid-upload leaves (crash point a): an open multipart upload with parts."""
    key = storage.new_object_key(workspace_id=workspace.id)
    intent = StorageIntent.objects.create(kind="upload", workspace=workspace, object_key=key)
    upload_id = storage.multipart_start(key=key, content_type="text/plain")
    storage.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=b"p" * (5 * 1024 * 1024))
    StorageIntent.objects.filter(pk=intent.pk).update(upload_id=upload_id)
    return intent


def interrupted_delete(workspace) -> tuple[File, StorageIntent]:
    """What a crash after a delete hid the row leaves (crash point c)."""
    file = make_file(workspace, b"doomed")
    File.objects.filter(pk=file.pk).update(state=File.State.DELETING)
    intent = StorageIntent.objects.create(
        kind="delete", workspace=workspace, object_key=file.object_key, file_id=file.id
    )
    return file, intent


def test_reconcile_finishes_every_kind_of_interruption(workspace):
    kept = make_file(workspace, b"kept")
    put = interrupted_put(workspace)
    multi = interrupted_multipart(workspace)
    file, delete = interrupted_delete(workspace)
    assert len(multipart_uploads(workspace.id)) == 1

    # Within the grace window nothing is touched: these could be live in another process.
    report = reconcile.reconcile()
    assert report.uploads_rolled_back == report.deletes_finished == 0
    assert StorageIntent.objects.filter(state="open").count() == 3

    _age([put, multi, delete])
    dry = reconcile.reconcile(dry_run=True)
    assert len(dry.actions) == 3 and StorageIntent.objects.filter(state="open").count() == 3
    assert put.object_key in bucket_keys(workspace.id)

    report = reconcile.reconcile()
    assert (report.uploads_rolled_back, report.deletes_finished, report.deferred) == (2, 1, 0)
    assert {i.pk: i.state for i in StorageIntent.objects.filter(pk__in=[put.pk, multi.pk, delete.pk])} == {
        put.pk: "rolled_back",
        multi.pk: "rolled_back",
        delete.pk: "committed",
    }
    assert not File.objects.filter(pk=file.pk).exists()
    assert list(File.objects.values_list("id", flat=True)) == [kept.id]
    assert_store_consistent(workspace.id)
    # A second pass has nothing left to do.
    again = reconcile.reconcile(grace_seconds=0)
    assert again.actions == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_reconcilers_claim_each_intent_once(workspace):
    intents = [interrupted_put(workspace, data=str(i).encode()) for i in range(24)]
    _age(intents)
    reports, errors = [], []

    def run():
        try:
            reports.append(reconcile.reconcile(grace_seconds=60))
        except Exception as exc:  # noqa: BLE001 — surfaced below
            errors.append(exc)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(r.uploads_rolled_back for r in reports) == 24
    assert set(StorageIntent.objects.values_list("attempts", flat=True)) == {1}
    assert_store_consistent(workspace.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first_chunk", [transfers.PART_SIZE + 1, 10], ids=["multipart", "single-put"])
def test_live_upload_is_left_alone_and_a_reclaimed_one_cannot_publish(workspace, first_chunk):
    """A slow upload in another thread: reconciliation leaves it alone while its owner lives;
    if it is claimed anyway (its owner's session ended), it fails instead of publishing a File
    whose object reconciliation is deleting."""
    part_sent = threading.Event()
    release = threading.Event()
    outcome = {}

    def chunks():
        yield b"a" * first_chunk  # multipart: one full part goes to the store now
        part_sent.set()
        release.wait(30)
        yield b"tail"

    def upload():
        try:
            outcome["file"] = services.file_upload_stream(
                workspace=workspace, chunks=chunks(), filename="slow.txt", mime_type="text/plain"
            )
        except Exception as exc:  # noqa: BLE001 — asserted below
            outcome["error"] = exc
        finally:
            from django.db import connection

            connection.close()

    thread = threading.Thread(target=upload)
    thread.start()
    assert part_sent.wait(30)
    if first_chunk > transfers.PART_SIZE:
        for _ in range(100):
            if StorageIntent.objects.get().upload_id:
                break
            time.sleep(0.05)
        assert StorageIntent.objects.get().upload_id

    # Its owner (this process) is alive: left alone, even with no grace window at all.
    assert reconcile.reconcile(grace_seconds=0).actions == []
    assert StorageIntent.objects.get().attempts == 0

    # The owner's session ends (as when its database connection breaks): now it is claimed.
    liveness.release()
    report = reconcile.reconcile(grace_seconds=0)
    assert report.uploads_rolled_back == 1
    release.set()
    thread.join(30)
    assert isinstance(outcome.get("error"), ServiceUnavailable), outcome
    assert File.objects.count() == 0
    assert_store_consistent(workspace.id)


def test_live_upload_completes_when_not_reclaimed(workspace):
    data = b"b" * (transfers.PART_SIZE * 2 + 123)
    file = services.file_upload_stream(
        workspace=workspace, chunks=[data[:100], data[100:]], filename="two-parts", mime_type="text/plain"
    )
    assert file.sha256 == hashlib.sha256(data).hexdigest()
    assert_store_consistent(workspace.id)


def test_delete_with_store_down_stays_hidden_until_reconciled(api, workspace, settings):
    file = make_file(workspace, b"x")
    storages = {**settings.STORAGES}
    original = storages["files"]
    storages["files"] = {**original, "OPTIONS": {**original["OPTIONS"], "endpoint_url": "http://127.0.0.1:9"}}
    settings.STORAGES = storages
    assert api.delete(f"/v1/files/{file.id}").json() == {"id": file.id, "type": "file_deleted"}
    assert api.get(f"/v1/files/{file.id}").status_code == 404
    assert api.get("/v1/files").json()["data"] == []
    assert File.objects.get(pk=file.pk).state == File.State.DELETING
    intent = StorageIntent.objects.get(kind="delete")
    assert intent.state == "open" and intent.last_error
    # Still down: reconciliation defers, keeps the intent.
    assert reconcile.reconcile(grace_seconds=0).deferred == 1
    settings.STORAGES = {**settings.STORAGES, "files": original}
    assert reconcile.reconcile(grace_seconds=0).deletes_finished == 1
    assert not File.objects.filter(pk=file.pk).exists()
    assert_store_consistent(workspace.id)


def test_stale_multipart_without_intent_and_orphans_are_cleaned(workspace):
    key = storage.new_object_key(workspace_id=workspace.id)
    upload_id = storage.multipart_start(key=key, content_type="text/plain")
    orphan = storage.new_object_key(workspace_id=workspace.id)
    storage.put_object(key=orphan, body=b"leak", content_type="text/plain")
    kept = make_file(workspace, b"kept")
    # Young: left alone (it may belong to a request that has not recorded its intent yet).
    report = reconcile.reconcile(scan_orphans=True)
    assert report.multipart_uploads_aborted == report.orphan_objects_deleted == 0
    report = reconcile.reconcile(grace_seconds=0, scan_orphans=True)
    assert report.multipart_uploads_aborted >= 1
    assert upload_id not in {u["upload_id"] for u in multipart_uploads(workspace.id)}
    assert report.orphan_objects_deleted >= 1
    assert set(bucket_keys(workspace.id)) == {kept.object_key}


def test_reconcile_files_command(workspace, capsys):
    intent = interrupted_put(workspace)
    _age([intent])
    call_command("reconcile_files", "--dry-run")
    out = capsys.readouterr().out
    assert "would roll back upload" in out and intent.object_key in out
    assert StorageIntent.objects.get(pk=intent.pk).state == "open"
    call_command("reconcile_files")
    assert "uploads_rolled_back=1" in capsys.readouterr().out
    assert StorageIntent.objects.get(pk=intent.pk).state == "rolled_back"
    assert bucket_keys(workspace.id) == {}


def test_reconcile_files_command_without_storage(settings, capsys):
    settings.MANGO_FILE_S3_BUCKET = None
    call_command("reconcile_files")
    assert "not configured" in capsys.readouterr().out


def test_tasks_are_registered_under_the_beat_names(workspace):
    for entry in ("files-reconcile", "files-expire"):
        assert celery_app.conf.beat_schedule[entry]["task"] in celery_app.tasks
    file = make_file(workspace, b"x", expires_at=timezone.now() - timedelta(seconds=5))
    assert files_expire() == 1
    assert not File.objects.filter(pk=file.pk).exists()
    assert files_reconcile()["deferred"] == 0
    assert_store_consistent(workspace.id)


def test_file_copy_is_an_independent_downloadable_session_copy(workspace):
    source = make_file(workspace, b"resource bytes", filename="data.csv", mime_type="text/csv")
    copy = services.file_copy(source=source, scope_session_id="sesn_1")
    assert copy.id != source.id and copy.object_key != source.object_key
    assert (copy.downloadable, copy.scope, copy.origin) == (True, {"type": "session", "id": "sesn_1"}, "resource_copy")
    assert (copy.filename, copy.mime_type, copy.size_bytes, copy.sha256) == (
        "data.csv",
        "text/csv",
        source.size_bytes,
        source.sha256,
    )
    services.file_delete(file=source)
    assert selectors.file_read_bounded(file=copy, max_bytes=100) == b"resource bytes"
    assert_store_consistent(workspace.id)


def test_file_copy_of_a_missing_object_is_404_and_leaves_nothing(workspace):
    source = make_file(workspace, b"x")
    storage.delete_object(key=source.object_key)
    with pytest.raises(NotFound):
        services.file_copy(source=source, scope_session_id="sesn_1")
    assert File.objects.count() == 1
    assert StorageIntent.objects.filter(state="open").count() == 0


def test_file_read_bounded_reads_at_most_one_byte_past_the_limit(workspace):
    file = make_file(workspace, b"0123456789")
    assert selectors.file_read_bounded(file=file, max_bytes=4) == b"01234"
    assert selectors.file_read_bounded(file=file, max_bytes=10) == b"0123456789"
    assert selectors.file_read_bounded(file=file, max_bytes=100) == b"0123456789"
    empty = make_file(workspace, b"")
    assert selectors.file_read_bounded(file=empty, max_bytes=100) == b""
    storage.delete_object(key=file.object_key)
    with pytest.raises(StoredObjectMissing):
        selectors.file_read_bounded(file=file, max_bytes=4)


def test_session_files_delete(workspace, other_api_key, s3_bucket):
    scoped = [make_file(workspace, b"o", scope_session_id="sesn_x", downloadable=True) for _ in range(3)]
    other_session = make_file(workspace, b"o", scope_session_id="sesn_y")
    top = make_file(workspace, b"t")
    foreign = make_file(other_api_key.workspace, b"f", scope_session_id="sesn_x")
    assert services.session_files_delete(workspace=workspace, session_id="sesn_x") == 3
    assert set(File.objects.values_list("id", flat=True)) == {other_session.id, top.id, foreign.id}
    assert all(k not in bucket_keys(workspace.id) for k in (f.object_key for f in scoped))
    assert_store_consistent(workspace.id)


def test_session_output_fields(workspace):
    file = services.file_upload_stream(
        workspace=workspace,
        chunks=iter([b"# out"]),
        filename="report.md",
        mime_type="text/markdown",
        scope_session_id="sesn_z",
        downloadable=True,
        origin=File.Origin.SESSION_OUTPUT,
        output_path="reports/report.md",
    )
    row = File.objects.get(pk=file.pk)
    assert (row.origin, row.output_path, row.scope_session_id) == ("session_output", "reports/report.md", "sesn_z")


def test_upload_cap_is_a_service_argument(workspace):
    with pytest.raises(RequestTooLarge):
        services.file_upload_stream(
            workspace=workspace, chunks=[b"123", b"45"], filename="x", mime_type="text/plain", max_bytes=4
        )
    assert bucket_keys(workspace.id) == {}
    assert StorageIntent.objects.get().state == "rolled_back"


def test_bodies_go_to_the_store_with_a_crc32c_it_verifies(workspace):
    """What the store keeps is what was sent: every body carries its CRC32C (a small File's
    object reports it back), and the store refuses a part whose bytes do not match it."""
    data = b"checked " * 1000
    small = make_file(workspace, data)
    head = storage.backend().client.head_object(
        Bucket=storage.backend().bucket, Key=small.object_key, ChecksumMode="ENABLED"
    )
    assert head["ChecksumCRC32C"] == storage.body_checksum(data)
    key = storage.new_object_key(workspace_id=workspace.id)
    upload_id = storage.multipart_start(key=key, content_type="text/plain")
    part = b"p" * (5 * 1024 * 1024)
    assert storage.multipart_upload_part(key=key, upload_id=upload_id, part_number=1, body=part) == {
        "ETag": f'"{hashlib.md5(part).hexdigest()}"',
        "ChecksumCRC32C": storage.body_checksum(part),
    }
    with pytest.raises(ClientError) as refused:
        storage.backend().client.upload_part(
            Bucket=storage.backend().bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=2,
            Body=part[:-1] + b"q",
            ChecksumCRC32C=storage.body_checksum(part),
        )
    assert refused.value.response["Error"]["Code"] == "BadDigest"
    storage.multipart_abort(key=key, upload_id=upload_id)
