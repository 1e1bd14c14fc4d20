"""The per-workspace storage quota: bytes of everything the workspace keeps in the object store
(its ready Files — uploads, resource copies and session outputs alike — and the objects other
apps own, skill files among them), MANGO_WORKSPACE_FILES_MAX_BYTES; and the count of its ready
Files, MANGO_WORKSPACE_FILES_MAX_COUNT.

Enforced where a File becomes visible, inside that transaction and after its writes
(``quota_enforce``): the workspace row is locked, the workspace's ready Files are summed (this
transaction's new rows included, Files it hides excluded), and if the sum is over the quota the
transaction is rolled back by the raised error, so the caller's usual failure path deletes the
staged object — nothing is left behind. Concurrent commits of one workspace queue on the row
lock and each sums what the ones before it committed: two uploads can never both pass the last
free byte.

Refusal: 400 ``invalid_request_error`` with ``details.error_code = "storage_quota_exceeded"``,
which the official SDK raises as ``StorageQuotaExceededError`` (api-contract.md, file errors); a
session's output publication reports it as a ``session.error``.
"""

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Sum

from core.errors import InvalidRequest
from core.models import Workspace
from files.models import File, OwnedObject


class StorageQuotaExceeded(InvalidRequest):
    code = "storage_quota_exceeded"


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int


def quota_bytes(*, workspace=None) -> int:
    return settings.MANGO_WORKSPACE_FILES_MAX_BYTES


def quota_files(*, workspace=None) -> int:
    return settings.MANGO_WORKSPACE_FILES_MAX_COUNT


def workspace_usage(workspace_id: str) -> Usage:
    """Bytes of the workspace's ready Files and owned objects, and the count of its ready Files
    (what the quota counts)."""
    row = File.objects.filter(workspace_id=workspace_id, state=File.State.READY).aggregate(
        size=Sum("size_bytes"), count=Count("id")
    )
    owned = OwnedObject.objects.filter(workspace_id=workspace_id, state=OwnedObject.State.READY).aggregate(
        size=Sum("size_bytes")
    )
    return Usage(bytes=(row["size"] or 0) + (owned["size"] or 0), files=row["count"])


def quota_enforce(*, workspace_id: str) -> None:
    """Call inside the transaction that makes Files visible, after its writes. Raises
    StorageQuotaExceeded (the caller's transaction then rolls back) when the workspace is over."""
    list(Workspace.objects.select_for_update().filter(pk=workspace_id).values_list("pk", flat=True))
    usage = workspace_usage(workspace_id)
    max_bytes, max_files = quota_bytes(), quota_files()
    if usage.bytes > max_bytes:
        raise StorageQuotaExceeded(
            f"The workspace's storage quota of {max_bytes} bytes (Files and skill files) would be exceeded "
            f"({usage.bytes} bytes with this change). Delete files or skill versions to free up space, then retry."
        )
    if usage.files > max_files:
        raise StorageQuotaExceeded(
            f"The workspace's Files quota of {max_files} files would be exceeded. Delete files, then retry."
        )
