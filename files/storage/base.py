"""The object-store interface every backend implements (STYLE.md 17), and what is the same for
all of them: the errors callers see, object keys, body checksums and the download stream's
shape.

A backend raises only StorageUnavailable (the store cannot be reached or refused the request:
the API renders it as 503) and StorageObjectMissing (the object or multipart upload does not
exist), never a library's exception: each translates at this boundary, in every method.
"""

import base64
import secrets
from collections.abc import Iterator

import crc32c

from core.errors import ObjectStoreUnavailable

KEY_PREFIX = "files/"

# Every body sent to the store carries its CRC32C, which the store verifies (a part that arrives
# different is refused: BadDigest): hardware CRC32C costs ~0.04 CPU s/GB, where botocore's own
# default, CRC32 through zlib, cost ~0.4 s/GB of the upload path (bench/files_throughput.py).
CHECKSUM_ALGORITHM = "CRC32C"


class StorageUnavailable(ObjectStoreUnavailable):
    """The store could not be reached or answered an error (503 object_store_unavailable)."""


class StorageObjectMissing(Exception):
    """The object (or multipart upload) does not exist."""


def unavailable(reason: str, cause: BaseException | None = None) -> StorageUnavailable:
    """The StorageUnavailable for `reason` (the store's error code, or the exception's name)."""
    error = StorageUnavailable(details={"store_error": reason})
    error.__cause__ = cause
    return error


def workspace_prefix(workspace_id: str, *, prefix: str = KEY_PREFIX) -> str:
    return f"{prefix}{workspace_id}/"


def new_object_key(*, workspace_id: str, prefix: str = KEY_PREFIX) -> str:
    """A new random key under `prefix` (Files' by default) and the workspace."""
    return f"{workspace_prefix(workspace_id, prefix=prefix)}{secrets.token_hex(16)}"


def body_checksum(body) -> str:
    """The base64 CRC32C of `body` (any buffer), as S3's x-amz-checksum-crc32c carries it."""
    return base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode("ascii")


class ObjectStream:
    """An object's body (or a byte range of it) as open_object() returns it, read in bounded
    chunks: iterable, and a file-like `read(size)` for servers that stream a response's file
    themselves (WSGI's wsgi.file_wrapper). The caller closes it.

    A backend may also let the server move the body with splice(2), socket to socket
    (`spliceable`, `splice_source()`, `spliced()`); this base class does not. `abort()`, from any
    thread, makes a read blocked on the store return soon (a download whose client went away
    stops reading the store)."""

    chunk_size: int

    def read(self, size: int | None = -1) -> bytes:
        """At most `size` bytes (chunk_size when negative); b"" at the end. A body that ends
        short of its length raises StorageUnavailable."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(self.chunk_size):
            yield chunk

    @property
    def spliceable(self) -> bool:
        """Whether splice_source() can hand the body over (checked without I/O)."""
        return False

    def splice_source(self) -> tuple[int, bytes, int] | None:
        """(the store socket's descriptor, the bytes already buffered off it, how many more
        follow), or None when the body cannot be moved that way. After this the stream is only
        told what was moved (spliced()) and closed."""
        return None

    def spliced(self, count: int) -> None:
        """The server moved the `count` bytes that followed splice_source()'s head."""
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ObjectStoreBackend:
    """One object store. Keys are the full object keys; the bucket is the backend's own."""

    def ping(self) -> None:
        """Raise StorageUnavailable unless the bucket answers."""
        raise NotImplementedError

    def put_object(self, *, key: str, body, content_type: str) -> None:
        raise NotImplementedError

    def multipart_start(self, *, key: str, content_type: str) -> str:
        """A new multipart upload's id."""
        raise NotImplementedError

    def multipart_upload_part(self, *, key: str, upload_id: str, part_number: int, body) -> dict:
        """Store one part (called from several threads at once); returns what
        multipart_complete needs of it."""
        raise NotImplementedError

    def multipart_complete(self, *, key: str, upload_id: str, parts: list[dict]) -> None:
        """`parts`: what multipart_upload_part returned for parts 1, 2, ... in order."""
        raise NotImplementedError

    def multipart_abort(self, *, key: str, upload_id: str) -> None:
        """Idempotent: an upload that is already gone is fine."""
        raise NotImplementedError

    def delete_object(self, *, key: str) -> None:
        """Idempotent: deleting a missing key succeeds."""
        raise NotImplementedError

    def copy_object(self, *, source_key: str, key: str, content_type: str) -> None:
        """Server-side copy: no bytes pass through this process."""
        raise NotImplementedError

    def head_object(self, *, key: str) -> dict | None:
        """{"size": int} for an existing object, None when missing."""
        raise NotImplementedError

    def open_object(self, *, key: str, first: int | None, last: int | None, chunk_size: int) -> ObjectStream:
        """The object's body (or the inclusive byte range first..last)."""
        raise NotImplementedError

    def list_objects(self, *, prefix: str) -> Iterator[dict]:
        """{"key", "size", "last_modified"} for every object under prefix."""
        raise NotImplementedError

    def list_multipart_uploads(self, *, prefix: str) -> Iterator[dict]:
        """{"key", "upload_id", "initiated"} for every unfinished multipart upload under prefix."""
        raise NotImplementedError
