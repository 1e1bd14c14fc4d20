from django.db import transaction
from django.utils import timezone

from agents.configs import environment_config_resolve, mcp_references_check
from agents.models import Agent, AgentVersion, Environment
from agents.multiagent import multiagent_merge, multiagent_refusal, roster_entries, roster_replace
from agents.selectors import agent_get, agent_version_get, environment_get
from core import references
from core.errors import Conflict, InvalidRequest, NotFound
from core.metadata import metadata_patch_apply
from core.signals import resource_change_announce
from core.updates import model_update


def agent_skills_resolve(*, workspace, skills: list[dict]) -> list[tuple[dict, object]]:
    """Each of an agent's skills with the version it names now: a custom skill of the workspace
    or one of the server's Anthropic (built-in document) skills; an unknown skill or version is a
    400 naming it."""
    try:
        return references.resolve("skill_versions", workspace=workspace, refs=skills)
    except NotFound as exc:
        raise InvalidRequest(f"skills: {exc.message}") from None


def agent_multiagent_resolve(*, workspace, agent_id: str, version: int, config: dict | None) -> dict | None:
    """The roster of a (merged) multiagent configuration resolved as the agent stores it: each
    entry a concrete `{type: agent, id, version}` (an id alone, or no version, is the latest
    version now; `self` is this agent at the version being written). Refused with a 400 naming
    the entry: an unknown or archived agent or version, one that has `multiagent` itself (the
    depth limit of 1, which also rules out cycles), the same agent twice, a second `self`; and
    what this server does not act on (agents.multiagent.multiagent_refusal)."""
    if config is None:
        return None
    multiagent_refusal(config)
    resolved, seen, selves = [], set(), set()
    for field, entry in roster_entries(config):
        roster = field.rsplit("[", 1)[0]  # the subagents' and the workflows' lists are checked apart
        if entry["type"] == "self":
            if roster in selves:
                raise InvalidRequest(f"{field}: at most one {{type: self}} entry.")
            selves.add(roster)
            ref = {"type": "agent", "id": agent_id, "version": version}
        else:
            try:
                row = agent_get(workspace=workspace, agent_id=entry["id"])
                if row.id == agent_id:
                    raise InvalidRequest(f"{field}: the agent itself is named with {{type: self}}.")
                row_version = agent_version_get(agent=row, version=entry.get("version"))
            except NotFound as exc:
                raise InvalidRequest(f"{field}: {exc.message}") from None
            if row.archived_at is not None:
                raise InvalidRequest(f"{field}: agent {row.id!r} is archived.")
            if row_version.config.get("multiagent"):
                raise InvalidRequest(
                    f"{field}: agent {row.id!r} (version {row_version.version}) has multiagent itself;"
                    " a roster's agents must not (depth limit 1)."
                )
            ref = {"type": "agent", "id": row.id, "version": row_version.version}
        if (roster, ref["id"]) in seen:
            raise InvalidRequest(f"{field}: agent {ref['id']!r} is in the roster twice.")
        seen.add((roster, ref["id"]))
        resolved.append(ref)
    return roster_replace(config, resolved)


@transaction.atomic
def agent_create(*, workspace, fields: dict, internal: bool = False) -> tuple[Agent, AgentVersion]:
    """An agent starts at version 1; its configuration is stored as an immutable version row.
    `internal`: the server's own (a dream's), left out of lists and not announced."""
    agent_skills_resolve(workspace=workspace, skills=fields.get("skills") or [])
    now = timezone.now()
    agent = Agent.objects.create(workspace=workspace, version=1, internal=internal, created_at=now, updated_at=now)
    fields["multiagent"] = agent_multiagent_resolve(
        workspace=workspace, agent_id=agent.id, version=1, config=multiagent_merge(None, fields.get("multiagent"))
    )
    version = AgentVersion.objects.create(agent=agent, version=1, config=fields, created_at=now)
    if not internal:
        resource_change_announce(workspace_id=agent.workspace_id, type="agent.created", object_id=agent.id)
    return agent, version


@transaction.atomic
def agent_update(*, workspace, agent_id: str, fields: dict, expected_version: int | None) -> tuple[Agent, AgentVersion]:
    """Every update writes version N+1 (given fields replace, metadata patches). With
    `expected_version`, a concurrent update in between is a 409 (never retried by the SDK)."""
    agent = agent_get(workspace=workspace, agent_id=agent_id, for_update=True)
    if expected_version is not None and expected_version != agent.version:
        raise Conflict(
            f"Agent {agent.id!r} is at version {agent.version}, not {expected_version}.",
            code="agent_version_mismatch",
        )
    if fields.get("skills"):
        agent_skills_resolve(workspace=workspace, skills=fields["skills"])
    current = agent_version_get(agent=agent)
    config = dict(current.config)
    patch = fields.pop("metadata", None)
    if "multiagent" in fields:
        merged = multiagent_merge(current.config.get("multiagent"), fields["multiagent"])
        fields["multiagent"] = agent_multiagent_resolve(
            workspace=workspace, agent_id=agent.id, version=agent.version + 1, config=merged
        )
    config.update(fields)
    if "tools" in fields or "mcp_servers" in fields:
        mcp_references_check(config)
    if patch is not None:
        config["metadata"] = metadata_patch_apply(current.config.get("metadata", {}), patch)
    now = timezone.now()
    agent.version += 1
    agent.updated_at = now
    agent.save(update_fields=["version", "updated_at"])
    version = AgentVersion.objects.create(agent=agent, version=agent.version, config=config, created_at=now)
    resource_change_announce(workspace_id=agent.workspace_id, type="agent.updated", object_id=agent.id)
    return agent, version


@transaction.atomic
def agent_archive(*, workspace, agent_id: str) -> tuple[Agent, AgentVersion]:
    agent = agent_get(workspace=workspace, agent_id=agent_id, for_update=True)
    if agent.archived_at is None:
        resource_change_announce(workspace_id=agent.workspace_id, type="agent.archived", object_id=agent.id)
    agent.archive()
    return agent, agent_version_get(agent=agent)


def _environment_announce(environment: Environment, type: str) -> None:
    resource_change_announce(workspace_id=environment.workspace_id, type=type, object_id=environment.id)


@transaction.atomic
def environment_create(
    *,
    workspace,
    name: str,
    config: dict,
    description: str | None,
    metadata: dict,
    scope: str | None,
    internal: bool = False,
) -> Environment:
    now = timezone.now()
    environment = Environment.objects.create(
        workspace=workspace,
        internal=internal,
        name=name,
        config=config,
        description=description,
        metadata=metadata,
        scope=scope or "organization",
        created_at=now,
        updated_at=now,
    )
    if not internal:
        resource_change_announce(
            workspace_id=environment.workspace_id, type="environment.created", object_id=environment.id
        )
    return environment


@transaction.atomic
def environment_update(*, workspace, environment_id: str, changes: dict) -> Environment:
    """Omitted fields keep their value; `config` keeps omitted networking/packages; metadata patches."""
    environment = environment_get(workspace=workspace, environment_id=environment_id, for_update=True)
    data = {key: changes[key] for key in ("name", "scope") if changes.get(key) is not None}
    if "description" in changes:
        data["description"] = changes["description"]
    if changes.get("config") is not None:
        data["config"] = environment_config_resolve(changes["config"], environment.config)
    if "metadata" in changes:
        data["metadata"] = metadata_patch_apply(environment.metadata, changes["metadata"], empty_deletes=True)
    resource_change_announce(
        workspace_id=environment.workspace_id, type="environment.updated", object_id=environment.id
    )
    return model_update(instance=environment, data=data)


@transaction.atomic
def environment_archive(*, workspace, environment_id: str) -> Environment:
    environment = environment_get(workspace=workspace, environment_id=environment_id, for_update=True)
    if environment.archived_at is None:
        _environment_announce(environment, "environment.archived")
    environment.archive()
    return environment


@transaction.atomic
def environment_delete(*, workspace, environment_id: str) -> None:
    """Sessions keep a snapshot of the environment's config, so deleting it never breaks them."""
    environment = environment_get(workspace=workspace, environment_id=environment_id)
    resource_change_announce(
        workspace_id=environment.workspace_id, type="environment.deleted", object_id=environment.id
    )
    environment.delete()
