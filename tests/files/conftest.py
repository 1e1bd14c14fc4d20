"""Helpers for the Files tests: everything checks the real bucket and the real database."""

import hashlib
import os
import tempfile

import pytest

from files import services, storage
from files.models import File, StorageIntent


def bucket_keys(workspace_id: str) -> dict[str, int]:
    """key -> size of every object stored for the workspace."""
    return {item["key"]: item["size"] for item in storage.list_objects(prefix=storage.workspace_prefix(workspace_id))}


def object_sha256(key: str) -> str:
    digest = hashlib.sha256()
    for chunk in storage.iter_object(storage.open_object(key=key)):
        digest.update(chunk)
    return digest.hexdigest()


def multipart_uploads(workspace_id: str) -> list[dict]:
    return list(storage.list_multipart_uploads(prefix=storage.workspace_prefix(workspace_id)))


def assert_store_consistent(workspace_id: str) -> None:
    """Every visible File has its object, with the recorded size and SHA-256; the bucket holds
    no object without a row, and no unfinished multipart upload remains."""
    keys = bucket_keys(workspace_id)
    rows = {f.object_key: f for f in File.objects.filter(workspace_id=workspace_id)}
    for key, file in rows.items():
        assert file.state == File.State.READY, file
        assert key in keys, f"{file.id} has no object"
        assert keys[key] == file.size_bytes
        assert object_sha256(key) == file.sha256
    assert set(keys) <= set(rows), f"objects without rows: {set(keys) - set(rows)}"
    assert multipart_uploads(workspace_id) == []


def make_file(workspace, data: bytes = b"hello", *, filename="hello.txt", mime_type="text/plain", **kwargs) -> File:
    return services.file_upload_stream(
        workspace=workspace, chunks=[data], filename=filename, mime_type=mime_type, **kwargs
    )


def temp_entries() -> set[str]:
    return set(os.listdir(tempfile.gettempdir()))


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch):
    """A temp directory of this test's own (the machine's /tmp is shared with other processes),
    so that "no temp file was left" is checkable: tempfile.gettempdir() points here, and
    servers started by the test get it as TMPDIR."""
    directory = tmp_path / "tmpdir"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    monkeypatch.setenv("TMPDIR", str(directory))
    return directory


@pytest.fixture
def workspace(api_key, s3_bucket):
    return api_key.workspace


@pytest.fixture
def open_intents():
    def _open():
        return list(StorageIntent.objects.filter(state=StorageIntent.State.OPEN))

    return _open
