"""Reads of agents (with their versions) and environments."""

from django.db.models import F, OuterRef, Subquery

from agents.models import Agent, AgentVersion, Environment
from core.errors import NotFound
from core.lookups import row_or_not_found
from core.pagination import in_range, keyset_page, rendered_bytes


def agent_get(*, workspace, agent_id: str, for_update: bool = False) -> Agent:
    # Hand-written (core.lookups.joined_row): every session create and agent call reads it.
    return row_or_not_found(
        Agent,
        where="t.workspace_id = %s AND t.id = %s",
        params=[workspace.pk, agent_id],
        for_update=for_update,
        missing=NotFound(f"Agent {agent_id!r} not found."),
    )


def agent_version_get(*, agent: Agent, version: int | None = None) -> AgentVersion:
    return row_or_not_found(
        AgentVersion,
        where="t.agent_id = %s AND t.version = %s",
        params=[agent.pk, version or agent.version],
        missing=NotFound(f"Agent {agent.id!r} has no version {version}."),
    )


def agent_list(*, workspace, limit: int, page: str | None, include_archived: bool, created: dict):
    queryset = Agent.objects.filter(workspace=workspace, internal=False)
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    queryset = in_range(queryset, "created_at", created)
    rows, next_page, _ = keyset_page(
        queryset, key="id", descending=True, limit=limit, page=page, purpose="agents", size=_agent_config_bytes()
    )
    versions = {row.agent_id: row for row in AgentVersion.objects.filter(agent__in=rows, version=F("agent__version"))}
    return [(agent, versions[agent.id]) for agent in rows], next_page


def _agent_config_bytes():
    current = AgentVersion.objects.filter(agent=OuterRef("pk"), version=OuterRef("version"))
    return Subquery(current.annotate(n=rendered_bytes("config")).values("n")[:1])


def agent_version_list(*, agent: Agent, limit: int, page: str | None):
    queryset = AgentVersion.objects.filter(agent=agent)
    rows, next_page, _ = keyset_page(
        queryset,
        key="version",
        descending=True,
        limit=limit,
        page=page,
        purpose="agent_versions",
        integer_key=True,
        size=rendered_bytes("config"),
    )
    return rows, next_page


def environment_get(*, workspace, environment_id: str, for_update: bool = False) -> Environment:
    # Hand-written (core.lookups.joined_row): session creates and API-key work calls read it.
    return row_or_not_found(
        Environment,
        where="t.workspace_id = %s AND t.id = %s",
        params=[workspace.pk, environment_id],
        for_update=for_update,
        missing=NotFound(f"Environment {environment_id!r} not found.", code="environment_not_found"),
    )


def environment_list(*, workspace, limit: int, page: str | None, include_archived: bool):
    queryset = Environment.objects.filter(workspace=workspace, internal=False)
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    rows, next_page, _ = keyset_page(
        queryset,
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="environments",
        size=rendered_bytes("config", "metadata", "description", "name"),
    )
    return rows, next_page
