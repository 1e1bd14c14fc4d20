"""Files: metadata in PostgreSQL, bytes in the object store, and the intents that bind the two.

A File row is visible (`ready`) only once its object is complete; a `deleting` row is hidden
from every route while its object is removed. An OwnedObject is the same for an object that is
not a File (a skill version's file, a sandbox checkpoint): every object in the store is a File's
or an OwnedObject's, or has an open intent. StorageIntent is the durable record of an operation
on the object store that a crash may interrupt; reconciliation finishes it.
"""

from datetime import UTC, datetime

from django.db import models
from django.db.models import Q

from core.ids import _ALPHABET, new_id
from core.models import Workspace

FILE_ID_PREFIX = "file_"
# new_id(): prefix, 10 chars of millisecond time, 16 random chars (Crockford base32).
FILE_ID_BODY_LENGTH = 26


def new_file_id() -> str:
    return new_id("file")


def file_id_time(file_id: str) -> datetime | None:
    """The creation time embedded in a well-formed file id, else None.

    File ids are minted in the transaction that makes the File visible and `created_at` is this
    time, so (created_at, id) order equals id order, and an id alone is a keyset position even
    after its File is deleted.
    """
    if not file_id.startswith(FILE_ID_PREFIX) or len(file_id) != len(FILE_ID_PREFIX) + FILE_ID_BODY_LENGTH:
        return None
    body = file_id[len(FILE_ID_PREFIX) :]
    if any(char not in _ALPHABET for char in body):
        return None
    millis = 0
    for char in body[:10]:
        millis = millis * 32 + _ALPHABET.index(char)
    try:
        return datetime.fromtimestamp(millis / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


class File(models.Model):
    class State(models.TextChoices):
        READY = "ready"
        DELETING = "deleting"

    class Origin(models.TextChoices):
        UPLOAD = "upload"
        RESOURCE_COPY = "resource_copy"
        SESSION_OUTPUT = "session_output"
        # A private copy of a PDF or image admitted into a session event (sent to the model as
        # base64 at each call): never listed or addressable by clients, deleted with the session.
        EVENT_SNAPSHOT = "event_snapshot"

    id = models.CharField(primary_key=True, max_length=40, default=new_file_id, editable=False)
    # PROTECT: dropping a workspace must go through file deletion, or its objects would leak.
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="files")
    filename = models.CharField(max_length=1024)
    mime_type = models.CharField(max_length=255)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    object_key = models.CharField(max_length=512, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.READY)
    downloadable = models.BooleanField(default=False)
    # Set for session-scoped Files (resource copies, session outputs): scope {type: session, id}.
    scope_session_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — NULL = top level
    origin = models.CharField(max_length=32, choices=Origin.choices, default=Origin.UPLOAD)
    # Relative path under /mnt/session/outputs, for session outputs.
    output_path = models.TextField(null=True, blank=True)  # noqa: DJ001 — NULL = not an output
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(size_bytes__gte=0), name="files_file_size_nonnegative"),
            models.CheckConstraint(condition=Q(state__in=["ready", "deleting"]), name="files_file_state_valid"),
            models.CheckConstraint(
                condition=Q(origin__in=["upload", "resource_copy", "session_output", "event_snapshot"]),
                name="files_file_origin_valid",
            ),
            models.CheckConstraint(
                condition=Q(output_path__isnull=True) | Q(origin="session_output"),
                name="files_file_output_path_only_for_outputs",
            ),
            # A session output path never shows two Files (publication swaps them in one commit).
            models.UniqueConstraint(
                fields=["scope_session_id", "output_path"],
                condition=Q(state="ready", origin="session_output"),
                name="files_one_visible_output_per_path",
            ),
        ]
        indexes = [
            # The hot list query: newest first, keyset on (created_at, id), visible rows only.
            models.Index(
                "workspace",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="files_list_ready",
                condition=Q(state="ready"),
            ),
            models.Index(
                "workspace",
                "scope_session_id",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="files_list_scope_ready",
                condition=Q(state="ready") & Q(scope_session_id__isnull=False),
            ),
            models.Index("expires_at", name="files_expiring", condition=Q(state="ready") & Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"

    @property
    def scope(self) -> dict | None:
        return {"type": "session", "id": self.scope_session_id} if self.scope_session_id else None

    @classmethod
    def new_ready(cls, *, workspace, object_key: str, **fields) -> "File":
        """An unsaved, ready File with a new id (its created_at is the id's time) for an object
        already in the store."""
        file_id = new_file_id()
        return cls(
            id=file_id,
            workspace=workspace,
            created_at=file_id_time(file_id),
            object_key=object_key,
            state=cls.State.READY,
            **fields,
        )


class OwnedObject(models.Model):
    """An object in the store that is not a File, held by a row of another app: its owner is named
    by kind and id (the owner's app keeps its own rows; files imports none of them). Its key is
    under `<owner_kind>/<workspace>/`. The row is created in the transaction that closes the
    object's upload intent and removed with its delete intent (files/services.py), so the orphan
    scan never collects an object a row names."""

    class OwnerKind(models.TextChoices):
        # owner_id: the SkillVersion's primary key.
        SKILL_VERSION = "skill_version"
        # owner_id: the SandboxChunk's primary key (a sleeping sandbox's checkpoint, sessions).
        SANDBOX_CHUNK = "sandbox_chunk"

    class State(models.TextChoices):
        READY = "ready"
        DELETING = "deleting"

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="owned_objects")
    owner_kind = models.CharField(max_length=32, choices=OwnerKind.choices)
    owner_id = models.CharField(max_length=64)
    object_key = models.CharField(max_length=512, unique=True)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.READY)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(size_bytes__gte=0), name="files_owned_size_nonnegative"),
            models.CheckConstraint(condition=Q(state__in=["ready", "deleting"]), name="files_owned_state_valid"),
            # The kind names the key prefix: a slug, never a path.
            models.CheckConstraint(condition=Q(owner_kind__regex=r"^[a-z][a-z_]*$"), name="files_owned_kind_slug"),
        ]
        indexes = [models.Index("owner_kind", "owner_id", name="files_owned_by_owner")]

    def __str__(self) -> str:
        return f"{self.owner_kind} {self.owner_id}: {self.object_key}"


def owned_key_prefix(owner_kind: str) -> str:
    """Where the objects of one owner kind live in the store."""
    return f"{owner_kind}/"


class StorageIntent(models.Model):
    """An object-store operation recorded (and committed) before it starts.

    `open` means not finished: either its owner process (files/liveness.py) is still working on
    it, or that process died and reconciliation finishes it at once. An intent with no owner
    (rows from before owners existed, or one its owner gave up on) is finished by
    reconciliation after the grace window. An intent that reconciliation has claimed
    (`attempts` > 0) no longer belongs to its request.
    """

    class Kind(models.TextChoices):
        UPLOAD = "upload"
        DELETE = "delete"

    class State(models.TextChoices):
        OPEN = "open"
        # Upload: the File row exists. Delete: the object and the row are gone.
        COMMITTED = "committed"
        # Upload abandoned: multipart aborted and any object deleted; no File row.
        ROLLED_BACK = "rolled_back"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="storage_intents")
    object_key = models.CharField(max_length=512)
    upload_id = models.CharField(max_length=1024, null=True, blank=True)  # noqa: DJ001 — NULL = single PUT
    # Set at commit of a File's upload, and on a File's delete; NULL for an OwnedObject's (its
    # object_key names it).
    file_id = models.CharField(max_length=40, null=True, blank=True)  # noqa: DJ001 — set at commit
    # files.liveness owner id of the process working on it; NULL = unknown (grace window applies).
    owner = models.BigIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["upload", "delete"]), name="files_intent_kind_valid"),
            models.CheckConstraint(
                condition=Q(state__in=["open", "committed", "rolled_back"]), name="files_intent_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(state="open", closed_at__isnull=True) | (~Q(state="open") & Q(closed_at__isnull=False)),
                name="files_intent_closed_at_matches_state",
            ),
        ]
        indexes = [
            models.Index("updated_at", name="files_intent_open", condition=Q(state="open")),
            models.Index("owner", name="files_intent_open_owner", condition=Q(state="open")),
            models.Index("object_key", name="files_intent_object_key"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.object_key} ({self.state})"
