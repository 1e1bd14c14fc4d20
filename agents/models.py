"""Agents (versioned configurations) and environments (where an agent's tools run).

The tables keep the names they had in the sessions app (agent_sessions_*): the move was state-only
(migrations 0001 here and agent_sessions 0012).
"""

from django.db import models

from core.ids import new_id
from core.models import Archivable, Workspace


def _agent_id() -> str:
    return new_id("agent")


def _environment_id() -> str:
    return new_id("env")


class Agent(Archivable, models.Model):
    """An agent. Its configuration lives in immutable AgentVersion rows; `version` is the latest."""

    archive_touches_updated_at = False

    id = models.CharField(primary_key=True, max_length=64, default=_agent_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agents")
    version = models.PositiveIntegerField(default=1)
    # Machinery of the server's own (a dream's agent, dreams/): never listed, never announced.
    internal = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agent_sessions_agent"
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
        db_table = "agent_sessions_agentversion"
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
    # Machinery of the server's own (a dream's environment, dreams/): never listed, never announced.
    internal = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agent_sessions_environment"
        indexes = [models.Index(fields=["workspace", "-id"], name="env_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"
