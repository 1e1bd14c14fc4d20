"""The object store, behind one interface (files/storage/base.py ObjectStoreBackend), with the
backend chosen once per process (STYLE.md 17), as the session sandboxes are:

* ``signed`` (files/storage/signed.py): UploadPart and GetObject as signed requests of our own
  on kept-alive connections, everything else through boto3; chosen when the store is reached
  over plain http, path-style, without a proxy, with credentials, and MANGO_FILE_S3_RAW_REQUESTS
  is on (the default);
* ``boto3`` (files/storage/boto.py): every request through boto3's S3 client.

Everything outside this package calls the module functions below (keyword-only); they delegate
to the chosen backend and raise StorageUnavailable / StorageObjectMissing, never a library's
exception. Object keys are random and prefixed by workspace; user filenames never reach a key.
A new backend implements ObjectStoreBackend (and, for downloads, an ObjectStream) and is named
in choose_backend().
"""

import os
import threading
from collections.abc import Iterator

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from core.errors import ServiceUnavailable
from files.storage.base import (
    CHECKSUM_ALGORITHM,
    KEY_PREFIX,
    ObjectStoreBackend,
    ObjectStream,
    StorageObjectMissing,
    StorageUnavailable,
    body_checksum,
    new_object_key,
    workspace_prefix,
)
from files.storage.boto import Boto3Backend
from files.storage.signed import SignedS3Backend, signable

__all__ = [
    "CHECKSUM_ALGORITHM",
    "KEY_PREFIX",
    "ObjectStoreBackend",
    "ObjectStream",
    "StorageObjectMissing",
    "StorageUnavailable",
    "backend",
    "body_checksum",
    "copy_object",
    "delete_object",
    "head_object",
    "is_configured",
    "iter_object",
    "list_multipart_uploads",
    "list_objects",
    "multipart_abort",
    "multipart_complete",
    "multipart_start",
    "multipart_upload_part",
    "new_object_key",
    "open_object",
    "ping",
    "put_object",
    "read_bounded",
    "require_configured",
    "workspace_prefix",
]

DEFAULT_CHUNK_BYTES = 1024 * 1024


def is_configured() -> bool:
    return bool(settings.MANGO_FILE_S3_BUCKET)


def require_configured() -> None:
    if not is_configured():
        raise ServiceUnavailable(
            "Files storage is not configured: set MANGO_FILE_S3_BUCKET (and the MANGO_FILE_S3_* "
            "endpoint, region and credential variables) to enable the Files API.",
            code="files_storage_not_configured",
        )


def choose_backend() -> ObjectStoreBackend:
    """The backend the settings call for (module docstring)."""
    plain = Boto3Backend.from_settings(bucket=settings.MANGO_FILE_S3_BUCKET)
    if settings.MANGO_FILE_S3_RAW_REQUESTS and signable(plain.client, plain.credentials):
        return SignedS3Backend(client=plain.client, credentials=plain.credentials, bucket=plain.bucket)
    return plain


_backend: ObjectStoreBackend | None = None
_backend_lock = threading.Lock()


def backend() -> ObjectStoreBackend:
    """The process's backend, built on first use and kept: one, even when several threads make
    that first use at once (a second one built beside it would hold connections of its own)."""
    global _backend
    built = _backend
    if built is None:
        with _backend_lock:
            if _backend is None:
                _backend = choose_backend()
            built = _backend
    return built


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs) -> None:
    global _backend
    if setting == "STORAGES" or setting.startswith("MANGO_FILE_S3_"):
        _backend = None


def _forget_backend() -> None:
    """In a forked child (a prefork worker, the crash campaign): the parent's connections, and
    its client's pool, are not this process's to use."""
    global _backend, _backend_lock
    _backend = None
    _backend_lock = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_forget_backend)


# --- the interface --------------------------------------------------------------------------


def ping() -> None:
    backend().ping()


def put_object(*, key: str, body, content_type: str) -> None:
    backend().put_object(key=key, body=body, content_type=content_type)


def multipart_start(*, key: str, content_type: str) -> str:
    return backend().multipart_start(key=key, content_type=content_type)


def multipart_upload_part(*, key: str, upload_id: str, part_number: int, body) -> dict:
    """Store one part; returns what multipart_complete needs of it (its ETag and checksum)."""
    return backend().multipart_upload_part(key=key, upload_id=upload_id, part_number=part_number, body=body)


def multipart_complete(*, key: str, upload_id: str, parts: list[dict]) -> None:
    """`parts`: what multipart_upload_part returned for parts 1, 2, ... in order."""
    backend().multipart_complete(key=key, upload_id=upload_id, parts=parts)


def multipart_abort(*, key: str, upload_id: str) -> None:
    """Idempotent: an upload that is already gone is fine."""
    backend().multipart_abort(key=key, upload_id=upload_id)


def delete_object(*, key: str) -> None:
    """Idempotent: deleting a missing key succeeds."""
    backend().delete_object(key=key)


def copy_object(*, source_key: str, key: str, content_type: str) -> None:
    """Server-side copy: no bytes pass through this process."""
    backend().copy_object(source_key=source_key, key=key, content_type=content_type)


def head_object(*, key: str) -> dict | None:
    """{"size": int} for an existing object, None when missing."""
    return backend().head_object(key=key)


def open_object(
    *, key: str, first: int | None = None, last: int | None = None, chunk_size: int = DEFAULT_CHUNK_BYTES
) -> ObjectStream:
    """The object's body (or the inclusive byte range first..last), read `chunk_size` at a time
    when iterated. The caller closes it (iter_object does)."""
    return backend().open_object(key=key, first=first, last=last, chunk_size=chunk_size)


def iter_object(stream: ObjectStream, *, chunk_size: int | None = None) -> Iterator[bytes]:
    """Yield an open_object() stream's chunks (of `chunk_size`, if given) and close it, however
    iteration ends."""
    if chunk_size is not None:
        stream.chunk_size = chunk_size
    try:
        yield from stream
    finally:
        stream.close()


def read_bounded(*, key: str, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes from the start of the object: enough to tell "over the
    limit" apart from "exactly at it" without reading a large object."""
    try:
        stream = open_object(key=key, first=0, last=max_bytes)
    except StorageUnavailable as exc:
        # S3 answers a range on an empty object with 416 InvalidRange.
        if exc.details.get("store_error") == "InvalidRange" and head_object(key=key) == {"size": 0}:
            return b""
        raise
    return b"".join(iter_object(stream))


def list_objects(*, prefix: str) -> Iterator[dict]:
    """{"key", "size", "last_modified"} for every object under prefix."""
    return backend().list_objects(prefix=prefix)


def list_multipart_uploads(*, prefix: str) -> Iterator[dict]:
    """{"key", "upload_id", "initiated"} for every unfinished multipart upload under prefix."""
    return backend().list_multipart_uploads(prefix=prefix)
