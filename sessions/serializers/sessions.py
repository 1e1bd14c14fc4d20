"""Sessions and their resources: input serializers and wire shapes (api-contract.md §5, §6)."""

from django.utils import timezone
from drf_spectacular.utils import PolymorphicProxySerializer
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
from processors.memory import INSTRUCTIONS_MAX_CHARS, MAX_MEMORY_STORES_PER_SESSION
from processors.repositories import MAX_BRANCH_LENGTH, MAX_REPOSITORY_RESOURCES, MAX_TOKEN_LENGTH, MAX_URL_LENGTH
from processors.resources import MAX_FILE_RESOURCES, MAX_MOUNT_PATH_LENGTH
from sessions.events import usage_snapshot
from sessions.serializers.events import InitialEventsField, initial_events

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


class ResourceParamSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["file"])
    file_id = Text(max_length=ID_MAX_CHARS)
    mount_path = Text(max_length=MAX_MOUNT_PATH_LENGTH, required=False, allow_null=True)

    def to_internal_value(self, data):
        super().to_internal_value(data)
        return data


class MonetaryAmountSerializer(InputSerializer):
    amount = serializers.RegexField(
        r"^(0|[1-9][0-9]{0,15})$", error_messages={"invalid": "an integer of minor units (cents), as a string."}
    )
    currency = serializers.ChoiceField(choices=["USD"])


class BudgetSerializer(InputSerializer):
    """`{type: limit, max_list_cost: {amount, currency: USD}}`: the session's spend ceiling."""

    type = serializers.ChoiceField(choices=["limit"])
    max_list_cost = MonetaryAmountSerializer()


class MemoryStoreResourceParamSerializer(InputSerializer):
    """`{type: memory_store, memory_store_id, access?, instructions?}`; `mount_path` is output-only
    (derived from the store's name), so a client's is refused rather than ignored."""

    type = serializers.ChoiceField(choices=["memory_store"])
    memory_store_id = Text(max_length=ID_MAX_CHARS)
    access = serializers.ChoiceField(choices=["read_write", "read_only"], required=False, allow_null=True)
    instructions = Text(max_length=INSTRUCTIONS_MAX_CHARS, required=False, allow_null=True, allow_blank=True)

    def validate(self, attrs):
        if "mount_path" in self.initial_data:
            raise serializers.ValidationError({"mount_path": "is output-only for memory_store resources."})
        return attrs


class BranchCheckoutSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["branch"])
    name = Text(max_length=MAX_BRANCH_LENGTH)


class CommitCheckoutSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["commit"])
    sha = Text(max_length=64)


class RepositoryResourceParamSerializer(InputSerializer):
    """`{type: github_repository, url, authorization_token?, checkout?, mount_path?}`: any git
    smart-HTTP host. The service checks the URL against the outbound guard, the checkout and the
    mount path, and encrypts the token (which no response ever carries)."""

    type = serializers.ChoiceField(choices=["github_repository"])
    url = Text(max_length=MAX_URL_LENGTH)
    authorization_token = Text(max_length=MAX_TOKEN_LENGTH, required=False, allow_null=True)
    checkout = TypedUnion(
        choices={"branch": BranchCheckoutSerializer, "commit": CommitCheckoutSerializer},
        required=False,
        allow_null=True,
    )
    mount_path = Text(max_length=MAX_MOUNT_PATH_LENGTH, required=False, allow_null=True)


class ResourceUpdateInputSerializer(InputSerializer):
    authorization_token = Text(max_length=MAX_TOKEN_LENGTH)


SESSION_RESOURCE_TYPES = {
    "file": ResourceParamSerializer,
    "github_repository": RepositoryResourceParamSerializer,
    "memory_store": MemoryStoreResourceParamSerializer,
}
# What resources.add takes (memory stores are attached at create only).
ADDABLE_RESOURCE_TYPES = {"file": ResourceParamSerializer, "github_repository": RepositoryResourceParamSerializer}


def parse_resource_add(body) -> dict:
    """resources.add's body: a file or github_repository resource param (memory stores are
    attached at create only)."""
    kind = body.get("type") if isinstance(body, dict) else None
    serializer = ADDABLE_RESOURCE_TYPES.get(kind) if isinstance(kind, str) else None
    if serializer is None:
        raise InvalidRequest(f"type: must be one of {', '.join(ADDABLE_RESOURCE_TYPES)}.")
    data = validated(serializer, body)
    return _repository(data) | {"type": kind} if kind == "github_repository" else data


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
            _repository(item) | {"field": f"resources[{index}]"}
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


def _repository(item) -> dict:
    checkout = item.get("checkout")
    return {
        "url": item["url"],
        "authorization_token": item.get("authorization_token") or None,
        "checkout": dict(checkout) if checkout is not None else None,
        "mount_path": item.get("mount_path"),
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


def resource_to_wire(resource) -> dict:
    if resource.type == "github_repository":
        return {
            "id": resource.id,
            "type": "github_repository",
            "url": resource.url,
            "mount_path": resource.mount_path,
            "checkout": resource.checkout,
            "created_at": rfc3339(resource.created_at),
            "updated_at": rfc3339(resource.updated_at),
        }
    return {
        "id": resource.id,
        "type": "file",
        "file_id": resource.file_id,
        "mount_path": resource.mount_path,
        "created_at": rfc3339(resource.created_at),
        "updated_at": rfc3339(resource.updated_at),
    }


def memory_store_resource_to_wire(attachment) -> dict:
    """BetaManagedAgentsMemoryStoreResource: the store's name and description as attached."""
    return {
        "type": "memory_store",
        "memory_store_id": attachment.memory_store_id,
        "access": attachment.access,
        "name": attachment.name,
        "description": attachment.description,
        "instructions": attachment.instructions,
        "mount_path": attachment.mount_path,
    }


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
        "deployment_id": None,
    }


# --- response shapes (schema only: rendering is session_to_wire / resource_to_wire) -----------


class ResourceOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["file"])
    file_id = serializers.CharField()
    mount_path = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class CheckoutOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["branch", "commit"])
    name = serializers.CharField(required=False)
    sha = serializers.CharField(required=False)


class RepositoryResourceOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["github_repository"])
    url = serializers.CharField()
    mount_path = serializers.CharField()
    checkout = CheckoutOutputSerializer(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def resource_output(**kwargs):
    """One resource as resources.add / retrieve / update answer it: a file or a repository."""
    return PolymorphicProxySerializer(
        component_name="FileOrRepositoryResource",
        serializers=[ResourceOutputSerializer, RepositoryResourceOutputSerializer],
        resource_type_field_name="type",
        **kwargs,
    )


class MemoryStoreResourceOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["memory_store"])
    memory_store_id = serializers.CharField()
    access = serializers.ChoiceField(choices=["read_write", "read_only"])
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    instructions = serializers.CharField(allow_null=True, allow_blank=True)
    mount_path = serializers.CharField()


def session_resources_output(**kwargs):
    """A session's resources: file resources, then memory stores (the SDK's
    BetaManagedAgentsSessionResource union)."""
    return PolymorphicProxySerializer(
        component_name="SessionResourceOutput",
        serializers=[ResourceOutputSerializer, RepositoryResourceOutputSerializer, MemoryStoreResourceOutputSerializer],
        resource_type_field_name="type",
        **kwargs,
    )


class ResourceListOutputSerializer(serializers.Serializer):
    data = session_resources_output(many=True)
    next_page = serializers.CharField(allow_null=True)


ResourceDeletedOutputSerializer = deleted_output("ResourceDeletedOutputSerializer", type="session_resource_deleted")


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
