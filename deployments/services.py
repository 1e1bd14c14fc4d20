"""Writes of deployments: create, update, archive, pause, unpause. Each announces itself
(core.signals.resource_changed: deployment.created, .updated, .archived, .paused, .unpaused) in
its transaction. What a run does is deployments/runs.py."""

import json

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.selectors import agent_get, agent_version_get, environment_get
from core import secrets as sealed
from core.errors import InvalidRequest
from core.limits import workspace_rows_cap
from core.metadata import metadata_patch_apply
from core.signals import resource_change_announce
from deployments.models import Deployment
from deployments.schedule import next_after, schedule_check
from deployments.selectors import deployment_get
from sessions.serializers.sessions import parse_session_create
from vaults.selectors import live_vault_ids


def _announce(deployment: Deployment, type: str) -> None:
    resource_change_announce(workspace_id=deployment.workspace_id, type=type, object_id=deployment.id)


def _plain(value):
    """Validated serializer data as plain JSON (OrderedDicts and the like)."""
    return json.loads(json.dumps(value))


def _agent_pin(*, workspace, agent) -> tuple[str, int]:
    """An agent id pins its latest version; {id, version} that version. Exists, not archived."""
    agent_id, version = (agent, None) if isinstance(agent, str) else (agent["id"], agent.get("version"))
    row = agent_get(workspace=workspace, agent_id=agent_id)
    if row.archived_at is not None:
        raise InvalidRequest(f"agent: {agent_id!r} is archived.")
    return row.id, agent_version_get(agent=row, version=version).version


def _environment_check(*, workspace, environment_id: str) -> None:
    environment = environment_get(workspace=workspace, environment_id=environment_id)
    if environment.archived_at is not None:
        raise InvalidRequest(f"environment_id: {environment_id!r} is archived.")


def _vaults_check(*, workspace, vault_ids: list[str]) -> list[str]:
    vault_ids = list(dict.fromkeys(vault_ids or []))
    unknown = [v for v in vault_ids if v not in live_vault_ids(workspace=workspace, vault_ids=vault_ids)]
    if unknown:
        raise InvalidRequest(f"vault_ids: no such vault (or archived): {', '.join(repr(v[:64]) for v in unknown[:5])}.")
    return vault_ids


def _resources_split(resources: list) -> tuple[list, str]:
    """(the resources as echoed, their write-only tokens sealed): a repository's
    authorization_token never comes back in a response."""
    public, tokens = [], {}
    for index, item in enumerate(resources):
        item = dict(item)
        token = item.pop("authorization_token", None)
        if token:
            tokens[str(index)] = token
        public.append(item)
    return public, sealed.encrypt(json.dumps(tokens)) if tokens else ""


def deployment_session_params(deployment: Deployment) -> dict:
    """What session_create takes for a run of the deployment, parsed as POST /v1/sessions
    parses a body (the same checks, the same 400s)."""
    tokens = json.loads(sealed.decrypt(deployment.resource_secrets)) if deployment.resource_secrets else {}
    resources = [
        {**item, "authorization_token": tokens[str(index)]} if str(index) in tokens else item
        for index, item in enumerate(deployment.resources)
    ]
    body = {
        "agent": {"type": "agent", "id": deployment.agent_id, "version": deployment.agent_version},
        "environment_id": deployment.environment_id,
        "resources": resources,
        "vault_ids": list(deployment.vault_ids),
        "metadata": {},
    }
    if deployment.budget is not None:
        body["budget"] = deployment.budget
    params = parse_session_create(body)
    # system.message too (the session route's initial_events take user events only): admitted
    # like the events a client sends.
    params["initial_events"] = [
        {"type": event["type"], "payload": {k: v for k, v in event.items() if k != "type"}}
        for event in deployment.initial_events
    ]
    return params


def _initial_events_check(events: list) -> list:
    events = _plain(events)
    for index, event in enumerate(events):
        if event["type"] == "system.message" and (
            index != len(events) - 1 or index == 0 or events[index - 1]["type"] != "user.message"
        ):
            raise InvalidRequest(
                f"initial_events[{index}]: a system.message must be the last event and follow a user.message."
            )
    return events


def _schedule_apply(deployment: Deployment, schedule: dict | None) -> None:
    if schedule is None:
        deployment.schedule_expression, deployment.schedule_timezone, deployment.next_run_at = "", "", None
        return
    expression = " ".join(schedule["expression"].split())
    schedule_check(expression=expression, timezone=schedule["timezone"])
    deployment.schedule_expression, deployment.schedule_timezone = expression, schedule["timezone"]
    deployment.next_run_at = next_after(expression=expression, timezone=schedule["timezone"], after=timezone.now())


@transaction.atomic
def deployment_create(*, workspace, data: dict) -> Deployment:
    live = Deployment.objects.filter(workspace=workspace, archived_at__isnull=True)
    limit, setting = settings.MANGO_WORKSPACE_MAX_DEPLOYMENTS, "MANGO_WORKSPACE_MAX_DEPLOYMENTS"
    workspace_rows_cap(workspace=workspace, rows=live, limit=limit, what="live deployments", setting=setting)
    agent_id, version = _agent_pin(workspace=workspace, agent=data["agent"])
    _environment_check(workspace=workspace, environment_id=data["environment_id"])
    resources, secrets = _resources_split(_plain(data.get("resources") or []))
    now = timezone.now()
    deployment = Deployment(
        workspace=workspace,
        name=data["name"],
        description=data.get("description"),
        agent_id=agent_id,
        agent_version=version,
        environment_id=data["environment_id"],
        initial_events=_initial_events_check(data["initial_events"]),
        metadata=dict(data.get("metadata") or {}),
        resources=resources,
        resource_secrets=secrets,
        vault_ids=_vaults_check(workspace=workspace, vault_ids=data.get("vault_ids")),
        budget=_plain(data["budget"]) if data.get("budget") else None,
        created_at=now,
        updated_at=now,
    )
    _schedule_apply(deployment, data.get("schedule"))
    deployment_session_params(deployment)  # the session parts checked as a session create checks them
    deployment.save(force_insert=True)
    _announce(deployment, "deployment.created")
    return deployment


@transaction.atomic
def deployment_update(*, workspace, deployment_id: str, data: dict) -> Deployment:
    """Each given field replaces the stored one (metadata: a patch, null deletes a key); a given
    schedule restarts from now (the next due time after the update)."""
    deployment = deployment_get(workspace=workspace, deployment_id=deployment_id, for_update=True)
    if deployment.archived_at is not None:
        raise InvalidRequest(f"Deployment {deployment_id!r} is archived.")
    if "agent" in data:
        deployment.agent_id, deployment.agent_version = _agent_pin(workspace=workspace, agent=data["agent"])
    if "environment_id" in data:
        _environment_check(workspace=workspace, environment_id=data["environment_id"])
        deployment.environment_id = data["environment_id"]
    if "name" in data:
        deployment.name = data["name"]
    if "description" in data:
        deployment.description = data["description"] or None
    if "initial_events" in data:
        deployment.initial_events = _initial_events_check(data["initial_events"])
    if "metadata" in data:
        deployment.metadata = metadata_patch_apply(dict(deployment.metadata), dict(data["metadata"] or {}))
    if "resources" in data:
        deployment.resources, deployment.resource_secrets = _resources_split(_plain(data["resources"] or []))
    if "vault_ids" in data:
        deployment.vault_ids = _vaults_check(workspace=workspace, vault_ids=data["vault_ids"])
    if "budget" in data:
        deployment.budget = _plain(data["budget"]) if data["budget"] else None
    if "schedule" in data:
        _schedule_apply(deployment, data["schedule"])
    deployment_session_params(deployment)
    deployment.updated_at = timezone.now()
    deployment.save()
    _announce(deployment, "deployment.updated")
    return deployment


@transaction.atomic
def deployment_archive(*, workspace, deployment_id: str) -> Deployment:
    """Archived: no run starts any more (scheduled or manual); its runs stay listed."""
    deployment = deployment_get(workspace=workspace, deployment_id=deployment_id, for_update=True)
    if deployment.archived_at is None:
        deployment.archived_at = deployment.updated_at = timezone.now()
        deployment.next_run_at = None
        deployment.save(update_fields=["archived_at", "updated_at", "next_run_at"])
        _announce(deployment, "deployment.archived")
    return deployment


def deployment_pause_locked(*, deployment: Deployment, reason: dict) -> None:
    deployment.paused_at = deployment.updated_at = timezone.now()
    deployment.paused_reason = reason
    deployment.save(update_fields=["paused_at", "paused_reason", "updated_at"])
    _announce(deployment, "deployment.paused")


@transaction.atomic
def deployment_pause(*, workspace, deployment_id: str) -> Deployment:
    """Paused: scheduled runs stop (manual runs are still allowed), paused_reason manual."""
    deployment = deployment_get(workspace=workspace, deployment_id=deployment_id, for_update=True)
    if deployment.archived_at is not None:
        raise InvalidRequest(f"Deployment {deployment_id!r} is archived.")
    if deployment.paused_at is None:
        deployment_pause_locked(deployment=deployment, reason={"type": "manual"})
    return deployment


@transaction.atomic
def deployment_unpause(*, workspace, deployment_id: str) -> Deployment:
    """Active again: the schedule resumes from now (times due while paused do not run)."""
    deployment = deployment_get(workspace=workspace, deployment_id=deployment_id, for_update=True)
    if deployment.archived_at is not None:
        raise InvalidRequest(f"Deployment {deployment_id!r} is archived.")
    if deployment.paused_at is not None:
        deployment.paused_at, deployment.paused_reason = None, None
        deployment.updated_at = timezone.now()
        if deployment.schedule_expression:
            deployment.next_run_at = next_after(
                expression=deployment.schedule_expression, timezone=deployment.schedule_timezone, after=timezone.now()
            )
        deployment.save(update_fields=["paused_at", "paused_reason", "updated_at", "next_run_at"])
        _announce(deployment, "deployment.unpaused")
    return deployment
