"""The deployments' wire: input bodies (client.beta.deployments.create / update) and the
BetaManagedAgentsDeployment and BetaManagedAgentsDeploymentRun shapes."""

from rest_framework import serializers

from core.api import rfc3339
from core.limits import ID_MAX_CHARS, Metadata
from core.serializers import Array, InputSerializer, Text, TypedUnion, page_output
from sessions.serializers.events import EVENT_PARAMS
from sessions.serializers.sessions import SESSION_RESOURCE_TYPES, AgentRefField, BudgetSerializer

INITIAL_EVENT_TYPES = ("user.message", "user.define_outcome", "system.message")
MAX_INITIAL_EVENTS = 50
MAX_VAULTS = 50
MAX_RESOURCES = 500
NAME_MAX_CHARS = 256
DESCRIPTION_MAX_CHARS = 2048


class ScheduleSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["cron"])
    expression = Text(max_length=256)
    timezone = Text(max_length=64)


def _events_field(**kwargs):
    return Array(
        child=TypedUnion(choices={kind: EVENT_PARAMS[kind] for kind in INITIAL_EVENT_TYPES}),
        min_length=1,
        max_length=MAX_INITIAL_EVENTS,
        **kwargs,
    )


def _resources_field(**kwargs):
    return Array(child=TypedUnion(choices=SESSION_RESOURCE_TYPES), max_length=MAX_RESOURCES, **kwargs)


def _vaults_field(**kwargs):
    return Array(child=Text(max_length=ID_MAX_CHARS), max_length=MAX_VAULTS, **kwargs)


class DeploymentCreateInputSerializer(InputSerializer):
    agent = AgentRefField()
    environment_id = Text(max_length=ID_MAX_CHARS)
    initial_events = _events_field()
    name = Text(max_length=NAME_MAX_CHARS)
    budget = BudgetSerializer(required=False, allow_null=True)
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    metadata = Metadata()
    resources = _resources_field(required=False)
    schedule = ScheduleSerializer(required=False, allow_null=True)
    vault_ids = _vaults_field(required=False)


class DeploymentUpdateInputSerializer(InputSerializer):
    agent = AgentRefField(required=False)
    budget = BudgetSerializer(required=False, allow_null=True)
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    environment_id = Text(max_length=ID_MAX_CHARS, required=False)
    initial_events = _events_field(required=False)
    metadata = Metadata(allow_null_values=True)
    name = Text(max_length=NAME_MAX_CHARS, required=False)
    resources = _resources_field(required=False, allow_null=True)
    schedule = ScheduleSerializer(required=False, allow_null=True)
    vault_ids = _vaults_field(required=False, allow_null=True)


# --- response shapes (schema only: rendering is deployment_to_wire / run_to_wire) -------------


class AgentReferenceOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["agent"])
    version = serializers.IntegerField()


class ScheduleOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["cron"])
    expression = serializers.CharField()
    timezone = serializers.CharField()
    last_run_at = serializers.CharField(allow_null=True)
    upcoming_runs_at = serializers.ListField(child=serializers.CharField())


class ErrorObjectOutputSerializer(serializers.Serializer):
    type = serializers.CharField()
    message = serializers.CharField()


class PausedReasonOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["manual", "error"])
    error = ErrorObjectOutputSerializer(required=False)


class DeploymentOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["deployment"])
    agent = AgentReferenceOutputSerializer()
    archived_at = serializers.CharField(allow_null=True)
    budget = serializers.DictField(allow_null=True)
    created_at = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    environment_id = serializers.CharField()
    initial_events = serializers.ListField(child=serializers.JSONField())
    metadata = serializers.DictField(child=serializers.CharField())
    name = serializers.CharField()
    paused_reason = PausedReasonOutputSerializer(allow_null=True)
    resources = serializers.ListField(child=serializers.JSONField())
    schedule = ScheduleOutputSerializer(allow_null=True)
    status = serializers.ChoiceField(choices=["active", "paused"])
    updated_at = serializers.CharField()
    vault_ids = serializers.ListField(child=serializers.CharField())


class TriggerContextOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["schedule", "manual"])
    scheduled_at = serializers.CharField(required=False)


class DeploymentRunOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["deployment_run"])
    agent = AgentReferenceOutputSerializer()
    created_at = serializers.CharField()
    deployment_id = serializers.CharField()
    error = ErrorObjectOutputSerializer(allow_null=True)
    session_id = serializers.CharField(allow_null=True)
    trigger_context = TriggerContextOutputSerializer()


DeploymentListOutputSerializer = page_output("DeploymentList", DeploymentOutputSerializer)
DeploymentRunListOutputSerializer = page_output("DeploymentRunList", DeploymentRunOutputSerializer)


def _agent(row) -> dict:
    return {"id": row.agent_id, "type": "agent", "version": row.agent_version}


def deployment_to_wire(deployment, *, upcoming: list | None = None) -> dict:
    """`upcoming`: the schedule's next due times (deployments.schedule), empty once archived."""
    schedule = None
    if deployment.schedule_expression:
        schedule = {
            "type": "cron",
            "expression": deployment.schedule_expression,
            "timezone": deployment.schedule_timezone,
            "last_run_at": rfc3339(deployment.last_run_at),
            "upcoming_runs_at": [rfc3339(moment) for moment in upcoming or []],
        }
    return {
        "id": deployment.id,
        "type": "deployment",
        "agent": _agent(deployment),
        "archived_at": rfc3339(deployment.archived_at),
        "budget": deployment.budget,
        "created_at": rfc3339(deployment.created_at),
        "description": deployment.description,
        "environment_id": deployment.environment_id,
        "initial_events": list(deployment.initial_events),
        "metadata": dict(deployment.metadata),
        "name": deployment.name,
        "paused_reason": deployment.paused_reason if deployment.paused_at else None,
        "resources": list(deployment.resources),
        "schedule": schedule,
        "status": "paused" if deployment.paused_at else "active",
        "updated_at": rfc3339(deployment.updated_at),
        "vault_ids": list(deployment.vault_ids),
    }


def run_to_wire(run) -> dict:
    trigger = {"type": run.trigger_type}
    if run.scheduled_at is not None:
        trigger["scheduled_at"] = rfc3339(run.scheduled_at)
    return {
        "id": run.id,
        "type": "deployment_run",
        "agent": _agent(run),
        "created_at": rfc3339(run.created_at),
        "deployment_id": run.deployment_id,
        "error": run.error,
        "session_id": run.session_id,
        "trigger_context": trigger,
    }
