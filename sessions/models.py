"""Sessions, their append-only event log, resources and memory attachments, and the self-hosted
work queue (environment keys, work items). The catalogues a session refers to live in their own
apps: agents/ (agents, environments), vaults/, memory/, skills/.

Wire rendering lives in sessions/serializers/; writes in sessions/services/; reads in
sessions/selectors.py.
"""

from django.db import models
from django.db.models import Q

from agents.models import Agent, Environment
from core.ids import new_id
from core.models import Archivable, Workspace
from sessions.events import EventType
from sessions.toolhost import ToolHost, tool_host


def _session_id() -> str:
    return new_id("sesn")


def _event_id() -> str:
    return new_id("sevt")


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
        SLEEPING = "sleeping"  # checkpointed into the store and removed (sessions.runtime.sleep)
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
    # per-workspace event storage quota sums it (services.event_bytes).
    event_bytes = models.PositiveBigIntegerField(default=0)

    # Runner lease: the worker currently running turns for this session, renewed by heartbeat.
    runner_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    runner_heartbeat_at = models.DateTimeField(null=True, blank=True)
    turn_started_at = models.DateTimeField(null=True, blank=True)

    # Sandbox (docker container or local folder), created lazily on the first tool call.
    sandbox_state = models.CharField(max_length=16, choices=SandboxState.choices, default=SandboxState.NONE)
    sandbox_ref = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    # Provision once (issue 38): a change that needs the running sandbox provisioned again (a
    # credential revoked or changed: its egress proxy goes) adds one to sandbox_changes; the runner
    # provisions (ensure, proxy, placements) only while sandbox_provisioned is behind it, or when the
    # sandbox is new or gone. Otherwise a tool call in a running sandbox is one Docker exec.
    sandbox_changes = models.PositiveIntegerField(default=0)
    sandbox_provisioned = models.PositiveIntegerField(default=0)
    last_error = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    # {type: limit, max_list_cost: {amount, currency}} or null (sessions/pricing.py): at the cap
    # the session makes no more model requests (stop_reason budget_reached).
    budget = models.JSONField(null=True, blank=True)
    # Memory stores attached at creation (SessionMemoryStore rows): 0 spares every turn the query.
    memory_store_count = models.PositiveSmallIntegerField(default=0)
    # Vaults given at creation, in order (the first one holding a credential for a server's URL
    # wins); each was the workspace's and live then.
    vault_ids = models.JSONField(default=list)
    # The deployment whose run created the session (deployments/), by id: sessions imports
    # nothing of deployments.
    deployment_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)  # noqa: DJ001
    # A multiagent session's child thread is a row of its own (its own log, lease, turn loop and
    # usage) whose `primary` is the session; routes see only primaries (selectors.session_get),
    # and reach a child as a thread of its primary. `thread_agent_name`: the agent it runs.
    primary = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="child_threads")
    thread_agent_name = models.CharField(max_length=255, blank=True, default="")
    # A child thread a workflow run started (sessions.models_workflows.WorkflowRun), by id.
    workflow_run_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-id"], name="session_ws_id_desc", condition=Q(deleted_at__isnull=True)),
            models.Index(fields=["status", "runner_heartbeat_at"], name="session_status_hb"),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def tool_host(self) -> ToolHost:
        """Where the session's built-in tools run (sessions/toolhost.py)."""
        return tool_host(self.environment_config)


class SandboxCheckpoint(models.Model):
    """A sleeping sandbox's state (sessions/services/checkpoints.py): PENDING while an attempt
    archives it (the intent: a crash leaves the live sandbox and this row, collected by the next
    attempt or the sweep), COMMITTED once complete (at most one per session; the one a wake
    restores and the next checkpoint builds on). `manifest`: {"workspace": [chunk id, …],
    "outputs": […]}, the tar streams in order."""

    class State(models.TextChoices):
        PENDING = "pending"
        COMMITTED = "committed"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="sandbox_checkpoints")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # The sandbox archived (repositories placed in it come back with /workspace).
    sandbox_ref = models.CharField(max_length=128, blank=True, default="")
    manifest = models.JSONField(default=dict)
    logical_bytes = models.BigIntegerField(default=0)  # the streams' size
    stored_bytes = models.BigIntegerField(default=0)  # its distinct chunks' size
    started_at = models.DateTimeField(auto_now_add=True)
    committed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session"], condition=Q(state="committed"), name="sandbox_checkpoint_one_committed"
            ),
            models.CheckConstraint(condition=Q(state__in=["pending", "committed"]), name="sandbox_checkpoint_state"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} checkpoint {self.pk} ({self.state})"

    def chunk_ids(self) -> list[int]:
        return [chunk_id for ids in self.manifest.values() for chunk_id in ids]


class SandboxChunk(models.Model):
    """One chunk of a session's checkpoints, held once per session by content (SHA-256); its
    bytes are an owned object of the files app (owner kind `sandbox_chunk`, owner id this row's
    id). PENDING from before its object is written until after: a crash leaves a row that owns
    whatever was written, so nothing is orphaned."""

    class State(models.TextChoices):
        PENDING = "pending"
        READY = "ready"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="sandbox_chunks")
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    object_key = models.CharField(max_length=512, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "sha256"], name="sandbox_chunk_unique"),
            models.CheckConstraint(condition=Q(state__in=["pending", "ready"]), name="sandbox_chunk_state"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} chunk {self.sha256[:12]}"


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


def resource_ids(count: int) -> list[str]:
    """`count` new resource ids in increasing order (ids made in one millisecond otherwise sort
    at random), so resources list in the order they were given."""
    return sorted(_resource_id() for _ in range(count))


class SessionResource(models.Model):
    """A File mounted into a session (DESIGN flow 5), or a git repository cloned into it.

    `file`: `file_id` is the session-scoped copy made when the resource was added;
    `source_file_id` the client's File it was copied from. `github_repository`: `url`,
    `checkout` ({type: branch, name} | {type: commit, sha} | null for the default branch) and
    `authorization_token`, encrypted (core/secrets.py; empty when none was given, never
    returned). `placed_ref` is the sandbox (container id or folder) the resource was last
    written into, or — for a repository — last tried in: `clone_error` then holds the
    repository_* error type of that try (empty after a clone that was placed)."""

    class Type(models.TextChoices):
        FILE = "file"
        GITHUB_REPOSITORY = "github_repository"

    id = models.CharField(primary_key=True, max_length=64, default=_resource_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="resources")
    type = models.CharField(max_length=32, default="file", choices=Type.choices)
    source_file_id = models.CharField(max_length=64, blank=True, default="")
    file_id = models.CharField(max_length=64, blank=True, default="")
    mount_path = models.CharField(max_length=1024)
    placed_ref = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 — NULL: not placed yet
    url = models.CharField(max_length=2048, blank=True, default="")
    checkout = models.JSONField(null=True, blank=True)
    authorization_token = models.TextField(blank=True, default="")  # a Fernet token, never the secret itself
    clone_error = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "mount_path"], name="session_resource_mount_unique"),
        ]
        indexes = [models.Index(fields=["session", "id"], name="session_resource_order")]

    def __str__(self) -> str:
        return f"{self.id} → {self.mount_path}"


class SessionMemoryStore(models.Model):
    """A memory store attached to a session at creation: the store's name and description as
    they were then, the access mode and instructions, and the mount path derived from the name."""

    class Access(models.TextChoices):
        READ_WRITE = "read_write"
        READ_ONLY = "read_only"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="memory_stores")
    # Not a foreign key: deleting a store leaves the session's record of it (write-back stops).
    memory_store_id = models.CharField(max_length=64)
    access = models.CharField(max_length=16, choices=Access.choices, default=Access.READ_WRITE)
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    instructions = models.TextField(null=True, blank=True)  # noqa: DJ001 — null and "" differ
    mount_path = models.CharField(max_length=1024)
    position = models.PositiveSmallIntegerField(default=0)
    # Write-back's baseline: {path: [memory id, sha256]} of what the sandbox was filled with,
    # moved on by each committed write-back step in that step's transaction. Empty until the
    # store is placed in a sandbox; null-able `placed_ref` names that sandbox.
    baseline = models.JSONField(default=dict)
    placed_ref = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 — NULL: not placed yet
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "memory_store_id"], name="session_memory_store_unique"),
            models.UniqueConstraint(fields=["session", "mount_path"], name="session_memory_mount_unique"),
        ]
        indexes = [models.Index(fields=["memory_store_id", "session"], name="session_memory_by_store")]

    def __str__(self) -> str:
        return f"{self.session_id} → {self.mount_path}"


def _environment_key_id() -> str:
    return new_id("envkey")


def _work_id() -> str:
    return new_id("work")


class EnvironmentKey(models.Model):
    """A self-hosted environment's worker credential. Only its SHA-256 is stored; the raw key is
    shown once, at creation. It authenticates only its environment's work endpoints (the SDK's
    EnvironmentWorker polls with it), never where an API key is expected."""

    id = models.CharField(primary_key=True, max_length=64, default=_environment_key_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="environment_keys")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=255, blank=True, default="")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=40, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "environment key"
        constraints = [
            models.CheckConstraint(condition=Q(key_hash__regex=r"^[0-9a-f]{64}$"), name="envkey_hash_is_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.key_hint}… ({self.environment_id})"

    def status(self) -> str:
        return "revoked" if self.revoked_at is not None else "active"


class WorkItem(models.Model):
    """One unit of self-hosted work: a session that needs a worker to run its tools.

    queued (a poll hands it out and marks it `polled_at`; unacknowledged past the poller's
    reclaim window it is handed out again) → starting (acknowledged; the lease runs) → active
    (first heartbeat) → stopping (a graceful stop was asked) → stopped. A lease that runs out
    (no heartbeat for its TTL) makes the item claimable again. A session has at most one
    item that is not stopped."""

    class State(models.TextChoices):
        QUEUED = "queued"
        STARTING = "starting"
        ACTIVE = "active"
        STOPPING = "stopping"
        STOPPED = "stopped"

    id = models.CharField(primary_key=True, max_length=64, default=_work_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="work_items")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="work_items")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="work_items")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    # The last poll that handed it out, and the worker that polled (Anthropic-Worker-ID).
    polled_at = models.DateTimeField(null=True, blank=True)
    poll_worker_id = models.CharField(max_length=255, blank=True, default="")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    latest_heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_ttl_seconds = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # How many times a poll handed it out (a reclaim counts again).
    claims = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session"], condition=~Q(state="stopped"), name="work_one_open_item_per_session"
            ),
        ]
        indexes = [
            models.Index(fields=["environment", "created_at"], name="work_env_open", condition=~Q(state="stopped")),
            models.Index(fields=["environment", "-id"], name="work_env_id_desc"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"


from sessions.models_workflows import WorkflowRun  # noqa: E402, F401  (one app's models)
