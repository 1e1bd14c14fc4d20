"""A multiagent session's workflow runs (sessions.services.workflows): one row per run, its plan
and its state, advanced under the row's lock. Imported by sessions.models (one app's models)."""

from django.db import models


class WorkflowRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        ENDED = "ended"

    id = models.CharField(primary_key=True, max_length=64)
    session = models.ForeignKey("agent_sessions.Session", on_delete=models.CASCADE, related_name="workflow_runs")
    # The coordinator's start_workflow_run tool use that created it: one run per call, a call
    # resumed after a crash finds its run.
    tool_use_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=255)
    description = models.TextField(null=True, blank=True)  # noqa: DJ001
    # [{id, name, description, tasks: [{agent: definition, message}]}], the plan's order.
    phases = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    phase_index = models.IntegerField(default=0)  # the phase open or next to open
    phase_open = models.BooleanField(default=False)
    phase_started_ids = models.JSONField(default=list)  # each opened phase's phase_started event id
    phase_threads = models.JSONField(default=list)  # the open phase's threads (session ids), in task order
    reports = models.JSONField(default=dict)  # session id of a thread -> its report (every phase's)
    threads_created = models.IntegerField(default=0)
    result = models.JSONField(null=True, blank=True)  # status_ended's result once ended
    deadline = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["session", "status"], name="workflow_run_session_status")]

    def __str__(self) -> str:
        return self.id
