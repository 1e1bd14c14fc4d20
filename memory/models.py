"""Memory stores: path-addressed UTF-8 memories and their append-only version log, in PostgreSQL.
Tables keep their agent_sessions_* names (a state-only move).
"""

from django.db import models

from core.ids import new_id
from core.models import Archivable, Workspace


def _memory_store_id() -> str:
    return new_id("memstore")


def _memory_id() -> str:
    return new_id("mem")


def _memory_version_id() -> str:
    return new_id("memver")


class MemoryStore(Archivable, models.Model):
    """A named container of memories (path-addressed UTF-8 text), scoped to a workspace. Its
    memories and their version log live in PostgreSQL (memory/services.py says why)."""

    id = models.CharField(primary_key=True, max_length=64, default=_memory_store_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memory_stores")
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)
    # What its version log holds, as the workspace's memory quota counts it (every version's path
    # and content bytes plus VERSION_OVERHEAD_BYTES): moved by the transaction that writes or
    # redacts a version, under this row's lock (memory/services.py).
    stored_bytes = models.PositiveBigIntegerField(default=0)

    class Meta:
        db_table = "agent_sessions_memorystore"
        indexes = [models.Index(fields=["workspace", "-id"], name="memstore_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class Memory(models.Model):
    """The current state of one memory: its path (unique in the store, compared byte-wise: the
    column's collation is "C") and content. `version_id` is the MemoryVersion holding that
    content; every change writes the version and this row in one transaction."""

    id = models.CharField(primary_key=True, max_length=64, default=_memory_id, editable=False)
    store = models.ForeignKey(MemoryStore, on_delete=models.CASCADE, related_name="memories")
    path = models.TextField(db_collation="C")
    content = models.TextField(blank=True, default="")
    content_sha256 = models.CharField(max_length=64)
    content_size_bytes = models.PositiveIntegerField()
    version_id = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "agent_sessions_memory"
        constraints = [models.UniqueConstraint(fields=["store", "path"], name="memory_store_path_unique")]

    def __str__(self) -> str:
        return f"{self.store_id}:{self.path}"


class MemoryVersion(models.Model):
    """One immutable entry of a store's log: a memory created, modified or deleted, by whom.
    `memory_id` is not a foreign key: versions outlive their memory. Only redaction changes a
    version afterwards (clearing path and content, recording who redacted it)."""

    class Operation(models.TextChoices):
        CREATED = "created"
        MODIFIED = "modified"
        DELETED = "deleted"

    id = models.CharField(primary_key=True, max_length=64, default=_memory_version_id, editable=False)
    store = models.ForeignKey(MemoryStore, on_delete=models.CASCADE, related_name="versions")
    memory_id = models.CharField(max_length=64)
    operation = models.CharField(max_length=16, choices=Operation.choices)
    path = models.TextField(null=True, blank=True, db_collation="C")  # noqa: DJ001 — null: redacted
    content = models.TextField(null=True, blank=True)  # noqa: DJ001 — null: deleted or redacted
    content_sha256 = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — null: deleted or redacted
    content_size_bytes = models.PositiveIntegerField(null=True, blank=True)
    # The actor ({type: api_actor, api_key_id} | {type: session_actor, session_id}), and its id
    # in a column of its own for the list filters.
    created_by = models.JSONField(null=True, blank=True)
    api_key_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — null: not an API key
    session_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — null: not a session
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "agent_sessions_memoryversion"
        indexes = [
            models.Index(fields=["store", "-id"], name="memver_store_id_desc"),
            models.Index(fields=["store", "memory_id", "-id"], name="memver_store_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.operation} {self.memory_id})"
