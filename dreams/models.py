"""Dreams: a job that reads a memory store and past sessions and writes a reorganized version of
the store, run as a Mango session of its own (docs/dreams.md).

Exactly once: the start (dreams/runs.py) records on this row, under its lock and in the
transaction that makes them, the output store it copied (`output_store_id`) and the session it
created (`session_id`), so a start killed anywhere and run again copies no store twice and
creates no second session. The status follows the session in the transaction of the session's
own status change (dreams/receivers.py)."""

from django.db import models
from django.db.models import Q

from core.ids import new_id
from core.models import Workspace


def _dream_id() -> str:
    return new_id("drm")


class Dream(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELED = "canceled"

    FINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELED)

    id = models.CharField(primary_key=True, max_length=64, default=_dream_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="dreams")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    memory_store_id = models.CharField(max_length=64)  # the input store
    session_ids = models.JSONField(default=list)  # the input sessions, sorted
    model_id = models.CharField(max_length=256)
    instructions = models.TextField(null=True, blank=True)  # noqa: DJ001 — null: none given
    output_behavior = models.CharField(max_length=32, default="create_new")
    # The store the dream writes (update_existing: the input store; create_new: its copy, once made).
    output_store_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    session_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    agent_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — its internal agent
    api_key_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — who created it
    # Its session's budget in US cents (MANGO_DREAM_MAX_LIST_COST_CENTS at create); null: none.
    max_list_cost_cents = models.BigIntegerField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)  # {type, message} when failed
    # Its session's interrupt is owed: set with a cancel's or a timeout's final status, cleared
    # by whoever delivers it (the API after that commit, else the sweep), once.
    interrupt_owed = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-id"], name="dream_ws_id_desc"),
            models.Index(fields=["status"], name="dream_active", condition=Q(status__in=["pending", "running"])),
            models.Index(fields=["id"], name="dream_interrupt_owed", condition=Q(interrupt_owed=True)),
        ]

    def __str__(self) -> str:
        return f"dream {self.id} ({self.status})"
