"""Agents (versioned), environments, sessions and their append-only event log.

Wire rendering lives in sessions/serializers/; writes in sessions/services/; reads in
sessions/selectors.py.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.ids import new_id
from core.models import Workspace
from sessions.events import EventType


class Archivable:
    """A row archived once: the first archive sets `archived_at`; archiving again changes nothing."""

    # Whether archiving counts as an update of the row; an agent's `updated_at` is its version's.
    archive_touches_updated_at = True

    def archive(self) -> None:
        if self.archived_at is not None:
            return
        self.archived_at = timezone.now()
        fields = ["archived_at"]
        if self.archive_touches_updated_at:
            self.updated_at = self.archived_at
            fields.append("updated_at")
        self.save(update_fields=fields)


def _agent_id() -> str:
    return new_id("agent")


def _environment_id() -> str:
    return new_id("env")


def _session_id() -> str:
    return new_id("sesn")


def _event_id() -> str:
    return new_id("sevt")


class Agent(Archivable, models.Model):
    """An agent. Its configuration lives in immutable AgentVersion rows; `version` is the latest."""

    archive_touches_updated_at = False

    id = models.CharField(primary_key=True, max_length=64, default=_agent_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agents")
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["workspace", "-id"], name="agent_ws_id_desc")]

    def __str__(self) -> str:
        return self.id


class AgentVersion(models.Model):
    """One immutable version of an agent: the full configuration as the API resolved it."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    # name, description, system, model, tools, mcp_servers, skills, metadata, execution_identity, multiagent
    config = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="agent_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.version}"


class Environment(Archivable, models.Model):
    id = models.CharField(primary_key=True, max_length=64, default=_environment_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="environments")
    name = models.CharField(max_length=255)
    description = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    # Resolved form: {"type": "cloud", "networking": {...}, "packages": {...}} or {"type": "self_hosted"}.
    config = models.JSONField()
    metadata = models.JSONField(default=dict)
    scope = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["workspace", "-id"], name="env_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class Session(Archivable, models.Model):
    class Status(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        RESCHEDULING = "rescheduling"
        TERMINATED = "terminated"

    class SandboxState(models.TextChoices):
        NONE = "none"  # never needed one (text-only so far)
        STARTING = "starting"  # admitted (services.sandboxes), being created
        RUNNING = "running"
        REMOVED = "removed"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=64, default=_session_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agent_sessions")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="sessions")
    agent_version = models.PositiveIntegerField()
    # SessionAgent snapshot taken at creation (the agent object minus metadata and timestamps).
    agent_snapshot = models.JSONField()
    environment_id = models.CharField(max_length=64)
    # Environment config snapshot: the runtime never re-reads a deleted or edited environment.
    environment_config = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    title = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    metadata = models.JSONField(default=dict)
    usage = models.JSONField(default=dict)
    active_seconds = models.FloatField(default=0.0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)
    # Deleted sessions are hidden from every route at once; the row stays so that open streams
    # can read the final session.deleted event.
    deleted_at = models.DateTimeField(null=True, blank=True)

    # Event log: the last sequence number handed out (appends lock this row).
    last_seq = models.PositiveBigIntegerField(default=0)
    # Bytes of the events' JSON (payload + private), kept by each append in the same UPDATE; the
    # per-workspace event storage quota sums it (services.events).
    event_bytes = models.PositiveBigIntegerField(default=0)

    # Runner lease: the worker currently running turns for this session, renewed by heartbeat.
    runner_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    runner_heartbeat_at = models.DateTimeField(null=True, blank=True)
    turn_started_at = models.DateTimeField(null=True, blank=True)

    # Sandbox (docker container or local folder), created lazily on the first tool call.
    sandbox_state = models.CharField(max_length=16, choices=SandboxState.choices, default=SandboxState.NONE)
    sandbox_ref = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    last_error = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    # {type: limit, max_list_cost: {amount, currency}} or null (sessions/pricing.py): at the cap
    # the session makes no more model requests (stop_reason budget_reached).
    budget = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-id"], name="session_ws_id_desc", condition=Q(deleted_at__isnull=True)),
            models.Index(fields=["status", "runner_heartbeat_at"], name="session_status_hb"),
        ]

    def __str__(self) -> str:
        return self.id


class SessionEvent(models.Model):
    """One event of a session's log. Append-only; `seq` orders it within the session."""

    id = models.CharField(primary_key=True, max_length=64, default=_event_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=64, choices=EventType.choices)
    # The public body minus id, type and processed_at.
    payload = models.JSONField(default=dict)
    # Server-only data (e.g. admitted snapshots, model-facing content). Never rendered.
    private = models.JSONField(default=dict, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="session_event_seq_unique")]
        indexes = [
            models.Index(
                fields=["session", "seq"],
                name="session_event_unprocessed",
                condition=Q(processed_at__isnull=True),
            ),
        ]
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


def _resource_id() -> str:
    return new_id("sesrsc")


class SessionResource(models.Model):
    """A File mounted into a session (DESIGN flow 5). `file_id` is the session-scoped copy made
    when the resource was added; `source_file_id` the client's File it was copied from.
    `placed_ref` is the sandbox (container id or folder) the copy was last written into."""

    id = models.CharField(primary_key=True, max_length=64, default=_resource_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="resources")
    type = models.CharField(max_length=32, default="file")
    source_file_id = models.CharField(max_length=64)
    file_id = models.CharField(max_length=64)
    mount_path = models.CharField(max_length=1024)
    placed_ref = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 — NULL: not placed yet
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "mount_path"], name="session_resource_mount_unique"),
        ]
        indexes = [models.Index(fields=["session", "id"], name="session_resource_order")]

    def __str__(self) -> str:
        return f"{self.id} → {self.mount_path}"


def _skill_id() -> str:
    return new_id("skill")


class Skill(models.Model):
    """A custom skill: a versioned directory upload (SKILL.md and the files it refers to).
    `name` is the kebab-case slug from the first upload's frontmatter, the same for every
    version; `latest_version` the newest version's id (a skill always holds one)."""

    id = models.CharField(primary_key=True, max_length=64, default=_skill_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="skills")
    display_name = models.CharField(max_length=255)
    name = models.CharField(max_length=64)
    # Empty until the first version is ready: such a skill is not visible yet.
    latest_version = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["workspace", "-id"], name="skill_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.id} ({self.name})"


class SkillVersion(models.Model):
    """One immutable upload of a skill. `version` is its public id (microseconds since the epoch,
    increasing per skill). `files`: [{path (inside the skill's directory), size, sha256, key}],
    each file one object in the store."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=32)
    name = models.CharField(max_length=64)
    description = models.TextField()
    files = models.JSONField(default=list)
    size_bytes = models.PositiveBigIntegerField(default=0)
    # False while its objects are being written (the row comes first, naming their keys, so a
    # crash leaves nothing the sweep cannot find); only ready versions are visible.
    ready = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["skill", "version"], name="skill_version_unique")]

    def __str__(self) -> str:
        return f"{self.skill_id}@{self.version}"
