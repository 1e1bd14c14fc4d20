"""Sessions: input serializers and wire shapes (api-contract.md §5; their resources: serializers/resources.py)."""

from django.utils import timezone
from rest_framework import serializers

from agents.serializers import ModelField, SkillSerializer
from agents.tools import McpServersField, ToolsField
from core.api import rfc3339
from core.errors import InvalidRequest
from core.limits import ID_MAX_CHARS, SKILLS_MAX, SYSTEM_MAX_CHARS, TITLE_MAX_CHARS, Metadata
from core.serializers import (
    Array,
    InputSerializer,
    Int,
    StringOrObject,
    Text,
    TypedUnion,
    deleted_output,
    page_output,
    validated,
)
from processors.memory import MAX_MEMORY_STORES_PER_SESSION
from processors.repositories import MAX_REPOSITORY_RESOURCES
from processors.resources import MAX_FILE_RESOURCES
from sessions.events import usage_snapshot
from sessions.serializers.events import InitialEventsField, initial_events
from sessions.serializers.resources import SESSION_RESOURCE_TYPES, repository_resource_params, session_resources_output

MAX_VAULTS_PER_SESSION = 20

SESSION_STATUSES = ("idle", "running", "rescheduling", "terminated")


class AgentRefSerializer(InputSerializer):
    """`{type: "agent", id, version?}`, or `agent_with_overrides` replacing the system prompt,
    tools or model of that version for this session only."""

    type = serializers.ChoiceField(choices=("agent", "agent_with_overrides"))
    id = Text(max_length=ID_MAX_CHARS)
    version = Int(min_value=1, required=False, allow_null=True)
    system = Text(max_length=SYSTEM_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    tools = ToolsField(required=False)
    model = ModelField(required=False, allow_null=True)
    skills = Array(child=SkillSerializer(), max_length=SKILLS_MAX, required=False, allow_null=True)
    mcp_servers = McpServersField(required=False)


class AgentRefField(StringOrObject):
    """An agent id, or an AgentRef object, validated here with its overrides parsed (the service
    resolves the id and version)."""

    string_schema = {"type": "string", "minLength": 1, "maxLength": ID_MAX_CHARS}
    object_serializer = AgentRefSerializer

    def to_internal_value(self, data):
        if isinstance(data, str):
            if not data or len(data) > ID_MAX_CHARS:
                raise serializers.ValidationError(f"an agent id is 1-{ID_MAX_CHARS} characters.")
            return data
        if not isinstance(data, dict):
            raise serializers.ValidationError("an agent id or {type: 'agent', id, version?}.")
        ref = AgentRefSerializer(data=data)
        if not ref.is_valid():
            raise serializers.ValidationError(ref.errors)
        # Overrides parsed as the agent routes parse them; other keys as sent.
        fields = ("tools", "model", "skills", "mcp_servers")
        parsed = {key: ref.validated_data[key] for key in fields if ref.validated_data.get(key) is not None}
        return {**data, **parsed}


class MonetaryAmountSerializer(InputSerializer):
    amount = serializers.RegexField(
        r"^(0|[1-9][0-9]{0,15})$", error_messages={"invalid": "an integer of minor units (cents), as a string."}
    )
    currency = serializers.ChoiceField(choices=["USD"])


class BudgetSerializer(InputSerializer):
    """`{type: limit, max_list_cost: {amount, currency: USD}}`: the session's spend ceiling."""

    type = serializers.ChoiceField(choices=["limit"])
    max_list_cost = MonetaryAmountSerializer()


class SessionCreateInputSerializer(InputSerializer):
    agent = AgentRefField()
    budget = BudgetSerializer(required=False)
    environment_id = Text(max_length=ID_MAX_CHARS)
    title = Text(max_length=TITLE_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    metadata = Metadata()
    resources = Array(
        child=TypedUnion(choices=SESSION_RESOURCE_TYPES),
        max_length=MAX_FILE_RESOURCES + MAX_MEMORY_STORES_PER_SESSION + MAX_REPOSITORY_RESOURCES,
        required=False,
        allow_null=True,
    )
    initial_events = InitialEventsField(required=False)
    vault_ids = Array(
        child=Text(max_length=ID_MAX_CHARS), max_length=MAX_VAULTS_PER_SESSION, required=False, allow_null=True
    )


class SessionUpdateAgentSerializer(InputSerializer):
    tools = ToolsField(required=False)
    mcp_servers = McpServersField(required=False)


class SessionUpdateInputSerializer(InputSerializer):
    title = Text(max_length=TITLE_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    metadata = Metadata(allow_null_values=True)
    agent = SessionUpdateAgentSerializer(required=False, allow_null=True)
    vault_ids = Array(child=Text(max_length=ID_MAX_CHARS), max_length=0, required=False, allow_null=True)
    budget = BudgetSerializer(required=False, allow_null=True)


def parse_session_create(body) -> dict:
    data = validated(SessionCreateInputSerializer, body)
    return {
        "agent": data["agent"],
        "environment_id": data["environment_id"],
        "metadata": data.get("metadata") or {},
        "title": data.get("title"),
        "initial_events": initial_events(data.get("initial_events")),
        "resources": [item for item in data.get("resources") or [] if item["type"] == "file"],
        "repositories": [
            repository_resource_params(item) | {"field": f"resources[{index}]"}
            for index, item in enumerate(data.get("resources") or [])
            if item["type"] == "github_repository"
        ],
        "memory_stores": [
            {
                "memory_store_id": item["memory_store_id"],
                "access": item.get("access") or "read_write",
                "instructions": item.get("instructions"),
            }
            for item in data.get("resources") or []
            if item["type"] == "memory_store"
        ],
        "budget": _budget(data.get("budget")),
        "vault_ids": list(dict.fromkeys(data.get("vault_ids") or [])),
    }


def _budget(value) -> dict | None:
    if value is None:
        return None
    return {"type": "limit", "max_list_cost": dict(value["max_list_cost"])}


def parse_session_changes(body) -> dict:
    if isinstance(body, dict) and body.get("vault_ids"):
        raise InvalidRequest("vault_ids: cannot be changed.")
    data = validated(SessionUpdateInputSerializer, body)
    changes = {}
    if "title" in data:
        changes["title"] = data["title"]
    if "metadata" in data:
        changes["metadata"] = data["metadata"] or {}
    if data.get("agent") is not None:
        changes["agent"] = {key: value for key, value in data["agent"].items() if key in ("tools", "mcp_servers")}
    if "budget" in data:
        changes["budget"] = _budget(data["budget"])
    return changes


def session_to_wire(
    session,
    *,
    resources: list | None = None,
    outcome_evaluations: list | None = None,
    family: tuple[dict, float] | None = None,
) -> dict:
    """`family`: the usage totals and active seconds of the session with its child threads
    (selectors.session_family_usage); the session's own without."""
    totals, active_seconds = family or (session.usage or {}, session.active_seconds)
    usage = usage_snapshot(totals, active_seconds=active_seconds)
    return {
        "id": session.id,
        "type": "session",
        "status": session.status,
        "agent": session.agent_snapshot,
        "environment_id": session.environment_id,
        "resources": resources if resources is not None else [],
        "metadata": session.metadata,
        "title": session.title,
        "created_at": rfc3339(session.created_at),
        "updated_at": rfc3339(session.updated_at),
        "archived_at": rfc3339(session.archived_at),
        "budget": session.budget if (session.budget or {}).get("type") == "limit" else None,
        "outcome_evaluations": [
            {**evaluation, "completed_at": rfc3339(evaluation["completed_at"])}
            for evaluation in outcome_evaluations or []
        ],
        "stats": {
            "active_seconds": round(active_seconds, 3),
            "duration_seconds": round((timezone.now() - session.created_at).total_seconds(), 3),
        },
        "usage": usage,
        "vault_ids": list(session.vault_ids or []),
        "deployment_id": session.deployment_id,
    }


# --- response shapes (schema only: rendering is session_to_wire) ----------------------------------


class SessionStatsOutputSerializer(serializers.Serializer):
    active_seconds = serializers.FloatField()
    duration_seconds = serializers.FloatField()


class SessionOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["session"])
    status = serializers.ChoiceField(choices=SESSION_STATUSES)
    agent = serializers.DictField(help_text="The agent's configuration at the session's version (SessionAgent).")
    environment_id = serializers.CharField(allow_null=True)
    resources = session_resources_output(many=True)
    metadata = serializers.DictField(child=serializers.CharField())
    title = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)
    budget = serializers.DictField(allow_null=True)
    outcome_evaluations = serializers.ListField(child=serializers.DictField())
    stats = SessionStatsOutputSerializer()
    usage = serializers.DictField()
    vault_ids = serializers.ListField(child=serializers.CharField())
    deployment_id = serializers.CharField(allow_null=True)


SessionListOutputSerializer = page_output("SessionListOutputSerializer", SessionOutputSerializer, prev_page=True)


SessionDeletedOutputSerializer = deleted_output("SessionDeletedOutputSerializer", type="session_deleted")
