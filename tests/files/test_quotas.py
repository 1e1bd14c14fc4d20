"""The per-workspace Files quota (files/quotas.py): uploads, resource copies and output
publication over it are refused, and nothing is left in the bucket or the database."""

import threading

import anthropic
import pytest

from files.models import File, StorageIntent
from files.quotas import workspace_usage
from tests.files.conftest import assert_store_consistent, bucket_keys

pytestmark = pytest.mark.django_db(transaction=True)


def _nothing_left(workspace_id: str, files_before: int, keys_before: dict) -> None:
    assert File.objects.filter(workspace_id=workspace_id).count() == files_before
    assert bucket_keys(workspace_id) == keys_before
    assert not StorageIntent.objects.filter(workspace_id=workspace_id, state=StorageIntent.State.OPEN).exists()
    assert_store_consistent(workspace_id)


def test_upload_over_the_byte_quota_is_refused_and_nothing_is_left(sdk, workspace, settings):
    settings.MANGO_WORKSPACE_FILES_MAX_BYTES = 1000
    sdk.beta.files.upload(file=("a.bin", b"a" * 600, "application/octet-stream"))
    assert workspace_usage(workspace.id).bytes == 600
    files_before, keys_before = File.objects.filter(workspace=workspace).count(), bucket_keys(workspace.id)

    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.files.upload(file=("b.bin", b"b" * 401, "application/octet-stream"))
    assert raised.value.status_code == 400
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert raised.value.body["error"]["details"]["error_code"] == "storage_quota_exceeded"
    assert "1000 bytes" in raised.value.body["error"]["message"]
    _nothing_left(workspace.id, files_before, keys_before)

    sdk.beta.files.upload(file=("c.bin", b"c" * 400, "application/octet-stream"))  # exactly full: fine
    assert workspace_usage(workspace.id).bytes == 1000


def test_upload_over_the_count_quota_is_refused(sdk, workspace, settings):
    settings.MANGO_WORKSPACE_FILES_MAX_COUNT = 2
    for name in ("1.txt", "2.txt"):
        sdk.beta.files.upload(file=(name, b"x", "text/plain"))
    files_before, keys_before = File.objects.filter(workspace=workspace).count(), bucket_keys(workspace.id)
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.files.upload(file=("3.txt", b"x", "text/plain"))
    assert raised.value.body["error"]["details"]["error_code"] == "storage_quota_exceeded"
    assert "2 files" in raised.value.body["error"]["message"]
    _nothing_left(workspace.id, files_before, keys_before)
    # Deleting frees the room again.
    sdk.beta.files.delete(next(iter(sdk.beta.files.list())).id)
    sdk.beta.files.upload(file=("3.txt", b"x", "text/plain"))


def test_concurrent_uploads_never_pass_the_quota_together(sdk, workspace, settings):
    settings.MANGO_WORKSPACE_FILES_MAX_BYTES = 2 * 300
    outcomes = []

    def upload(n):
        try:
            sdk.beta.files.upload(file=(f"{n}.bin", bytes([n]) * 300, "application/octet-stream"))
            outcomes.append("ok")
        except anthropic.BadRequestError as exc:
            outcomes.append(exc.body["error"]["details"]["error_code"])

    threads = [threading.Thread(target=upload, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["ok", "ok"] + ["storage_quota_exceeded"] * 4
    assert workspace_usage(workspace.id).bytes == 600
    assert len(bucket_keys(workspace.id)) == 2
    _nothing_left(workspace.id, 2, bucket_keys(workspace.id))


@pytest.mark.docker
def test_resource_copy_over_the_quota_is_refused(sdk, workspace, settings):
    agent = sdk.beta.agents.create(name="q", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    source = sdk.beta.files.upload(file=("data.csv", b"d" * 500, "text/csv"))
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    settings.MANGO_WORKSPACE_FILES_MAX_BYTES = 999  # the source fits, a copy of it does not
    files_before, keys_before = File.objects.filter(workspace=workspace).count(), bucket_keys(workspace.id)

    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.resources.add(session.id, type="file", file_id=source.id)
    assert raised.value.body["error"]["details"]["error_code"] == "storage_quota_exceeded"
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.create(
            agent=agent.id, environment_id=environment.id, resources=[{"type": "file", "file_id": source.id}]
        )
    assert raised.value.body["error"]["details"]["error_code"] == "storage_quota_exceeded"
    assert list(sdk.beta.sessions.resources.list(session.id)) == []
    _nothing_left(workspace.id, files_before, keys_before)
