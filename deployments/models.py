"""Deployments (an agent bound to an environment, resources, vaults, a budget, initial events
and an optional cron schedule) and their runs (one record per session creation attempted).

Exactly once per due time: a scheduled run is written in the transaction that holds the
deployment's row lock and moves its `next_run_at` past the time it fires, and the database
refuses a second run for the same (deployment, scheduled_at) whatever races it (the
`drun_deployment_scheduled_at` constraint). The session the run creates commits in that same
transaction, so a process killed anywhere before the commit leaves nothing, and the next fire
anywhere runs that time once."""

from django.db import models
from django.db.models import Q

from core.ids import new_id
from core.models import Workspace


def _deployment_id() -> str:
    return new_id("depl")


def _run_id() -> str:
    return new_id("drun")


class Deployment(models.Model):
    id = models.CharField(primary_key=True, max_length=64, default=_deployment_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="deployments")
    name = models.CharField(max_length=256)
    description = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    agent_id = models.CharField(max_length=64)
    agent_version = models.PositiveIntegerField()
    environment_id = models.CharField(max_length=64)
    # As the client sent them (user.message, user.define_outcome, system.message).
    initial_events = models.JSONField(default=list)
    metadata = models.JSONField(default=dict)
    # As sent, minus write-only credentials (a repository's authorization_token), which are kept
    # sealed (core/secrets.py) in `resource_secrets` by the resource's index.
    resources = models.JSONField(default=list)
    resource_secrets = models.TextField(blank=True, default="", editable=False)
    vault_ids = models.JSONField(default=list)
    budget = models.JSONField(null=True, blank=True)
    schedule_expression = models.CharField(max_length=256, blank=True, default="")
    schedule_timezone = models.CharField(max_length=64, blank=True, default="")
    # The first due time not yet fired (null: no schedule, or archived).
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_reason = models.JSONField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-id"], name="depl_ws_id_desc"),
            # The scheduler's scan: unpaused, unarchived, scheduled deployments by due time.
            models.Index(
                fields=["next_run_at"],
                name="depl_due",
                condition=Q(next_run_at__isnull=False, paused_at__isnull=True, archived_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class DeploymentRun(models.Model):
    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"

    id = models.CharField(primary_key=True, max_length=64, default=_run_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="deployment_runs")
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="runs")
    agent_id = models.CharField(max_length=64)
    agent_version = models.PositiveIntegerField()
    trigger_type = models.CharField(max_length=16, choices=Trigger.choices)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    session_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    error = models.JSONField(null=True, blank=True)  # {type, message}; exactly one of it and session_id
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "scheduled_at"],
                name="drun_deployment_scheduled_at",
                condition=Q(scheduled_at__isnull=False),
            ),
            models.CheckConstraint(
                condition=Q(session_id__isnull=False, error__isnull=True)
                | Q(session_id__isnull=True, error__isnull=False),
                name="drun_session_xor_error",
            ),
        ]
        indexes = [models.Index(fields=["workspace", "-id"], name="drun_ws_id_desc")]

    def __str__(self) -> str:
        return f"run {self.id} of {self.deployment_id}"
