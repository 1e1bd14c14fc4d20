from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentVersion
from core.errors import Conflict, InvalidRequest, NotFound
from core.metadata import metadata_patch_apply
from sessions.selectors import agent_get, agent_version_get
from sessions.selectors.skills import skill_versions_resolve


def agent_skills_resolve(*, workspace, skills: list[dict]) -> list[tuple[dict, object]]:
    """Each of an agent's skills with the version it names now. Anthropic's own skills cannot be
    served here (their files are Anthropic's): a 400 saying so; an unknown custom skill or
    version is a 400 naming it."""
    for index, ref in enumerate(skills):
        if ref["type"] == "anthropic":
            raise InvalidRequest(
                f"skills[{index}]: Anthropic skills ({ref['skill_id']!r}) cannot be served by this server;"
                " upload the skill's directory with POST /v1/skills and use it as a custom skill."
            )
    try:
        return skill_versions_resolve(workspace=workspace, refs=skills)
    except NotFound as exc:
        raise InvalidRequest(f"skills: {exc.message}") from None


@transaction.atomic
def agent_create(*, workspace, fields: dict) -> tuple[Agent, AgentVersion]:
    """An agent starts at version 1; its configuration is stored as an immutable version row."""
    agent_skills_resolve(workspace=workspace, skills=fields.get("skills") or [])
    now = timezone.now()
    agent = Agent.objects.create(workspace=workspace, version=1, created_at=now, updated_at=now)
    version = AgentVersion.objects.create(agent=agent, version=1, config=fields, created_at=now)
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
    config.update(fields)
    if patch is not None:
        config["metadata"] = metadata_patch_apply(current.config.get("metadata", {}), patch)
    now = timezone.now()
    agent.version += 1
    agent.updated_at = now
    agent.save(update_fields=["version", "updated_at"])
    version = AgentVersion.objects.create(agent=agent, version=agent.version, config=config, created_at=now)
    return agent, version


@transaction.atomic
def agent_archive(*, workspace, agent_id: str) -> tuple[Agent, AgentVersion]:
    agent = agent_get(workspace=workspace, agent_id=agent_id, for_update=True)
    agent.archive()
    return agent, agent_version_get(agent=agent)
