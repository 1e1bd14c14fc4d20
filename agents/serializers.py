"""Agents: input serializers (create, update) and the wire shape (api-contract.md §3). The SDK's
types are the ground truth for both."""

import json

from rest_framework import serializers

from agents.configs import agent_snapshot, environment_config_resolve, mcp_references_check
from agents.multiagent import multiagent_parse
from agents.tools import McpServersField, ToolsField
from core.api import rfc3339
from core.errors import InvalidRequest
from core.limits import (
    AGENT_CONFIG_MAX_BYTES,
    ALLOWED_HOSTS_MAX,
    DESCRIPTION_MAX_CHARS,
    ENVIRONMENT_NAME_MAX_CHARS,
    HOST_MAX_CHARS,
    ID_MAX_CHARS,
    MODEL_ID_MAX_CHARS,
    NAME_MAX_CHARS,
    PACKAGE_MAX_CHARS,
    PACKAGES_PER_MANAGER_MAX,
    SKILLS_MAX,
    SYSTEM_MAX_CHARS,
    Metadata,
)
from core.serializers import (
    Array,
    Bool,
    InputSerializer,
    Int,
    Object,
    StringOrObject,
    Text,
    TypedUnion,
    deleted_output,
    page_output,
    validated,
)

EFFORTS = ("low", "medium", "high", "xhigh", "max")


# --- model -----------------------------------------------------------------------------------


class EffortSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=EFFORTS)


class EffortField(StringOrObject):
    string_schema = {"type": "string", "enum": list(EFFORTS)}
    object_serializer = EffortSerializer

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = {"type": data}
        if not isinstance(data, dict) or data.get("type") not in EFFORTS:
            raise serializers.ValidationError(f"must be one of {', '.join(EFFORTS)}.")
        return {"type": data["type"]}


class ModelConfigSerializer(InputSerializer):
    id = Text(max_length=MODEL_ID_MAX_CHARS)
    effort = EffortField(required=False, allow_null=True)
    speed = serializers.ChoiceField(choices=("standard", "fast"), required=False, allow_null=True)
    inference_geo = Text(max_length=64, required=False, allow_null=True)


class ModelField(StringOrObject):
    """A model id string or `{id, effort?, speed?, inference_geo?}`: always the object form."""

    string_schema = {"type": "string", "minLength": 1, "maxLength": MODEL_ID_MAX_CHARS}
    object_serializer = ModelConfigSerializer

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = {"id": data}
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be a model id or an object.")
        config = ModelConfigSerializer(data=data)
        if not config.is_valid():
            raise serializers.ValidationError(config.errors)
        return {key: value for key, value in config.validated_data.items() if value is not None}


def parse_model(value) -> dict:
    return validated(_ModelBody, {"model": value})["model"]


class _ModelBody(InputSerializer):
    model = ModelField()


# --- skills, identity ------------------------------------------------------------------------


class SkillSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=("anthropic", "custom"))
    skill_id = Text(max_length=ID_MAX_CHARS)
    version = Text(max_length=64, required=False, allow_null=True, allow_blank=True)

    def validate(self, data):
        return {"type": data["type"], "skill_id": data["skill_id"], "version": data.get("version") or "latest"}


class ServiceAccountSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["service_account"])


class AwsRoleSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["aws_role"])
    role_arn = Text(max_length=2048)

    def validate(self, data):
        # No silent drop: nothing in this server assumes a role for the agent's tools.
        raise serializers.ValidationError(
            {"type": "aws_role cannot be acted on by this server (it assumes no AWS role); use service_account."}
        )


EXECUTION_IDENTITY_TYPES = {"service_account": ServiceAccountSerializer, "aws_role": AwsRoleSerializer}


# --- agent bodies ----------------------------------------------------------------------------


class AgentCreateInputSerializer(InputSerializer):
    name = Text(max_length=NAME_MAX_CHARS)
    model = ModelField()
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    system = Text(max_length=SYSTEM_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    tools = ToolsField(required=False)
    mcp_servers = McpServersField(required=False)
    skills = Array(child=SkillSerializer(), max_length=SKILLS_MAX, required=False, allow_null=True)
    execution_identity = TypedUnion(choices=EXECUTION_IDENTITY_TYPES, required=False, allow_null=True)
    multiagent = Object(required=False, allow_null=True)
    metadata = Metadata()

    def validate_multiagent(self, value):
        return multiagent_parse(value)  # its shape; merged and resolved by the service


class AgentUpdateInputSerializer(AgentCreateInputSerializer):
    """Each given field replaces the stored one, except metadata (a patch: null deletes a key)."""

    name = Text(max_length=NAME_MAX_CHARS, required=False)
    model = ModelField(required=False)
    version = Int(required=False, allow_null=True, help_text="The version this update expects (409 otherwise).")
    metadata = Metadata(allow_null_values=True)


AGENT_FIELDS = ("name", "model", "system", "description", "tools", "mcp_servers", "skills", "metadata")


def parse_agent_fields(body, *, partial: bool) -> tuple[dict, int | None]:
    """Agent create (partial=False) or update (partial=True) body → (config fields to store,
    the expected version of an update)."""
    data = validated(AgentUpdateInputSerializer if partial else AgentCreateInputSerializer, body)
    defaults = {
        "system": None,
        "description": None,
        "tools": [],
        "mcp_servers": [],
        "skills": [],
        "execution_identity": None,
        "multiagent": None,
        "metadata": {},
    }
    out: dict = {}
    for key in ("name", "model", *defaults):
        if key in data:
            out[key] = data[key]
        elif not partial:
            out[key] = defaults[key]
    for key in ("tools", "mcp_servers", "skills", "metadata"):
        if key in out and out[key] is None:
            out[key] = [] if key != "metadata" else {}
    if "execution_identity" in out:
        out["execution_identity"] = _execution_identity(out["execution_identity"])
    if out.get("tools") is not None and out.get("mcp_servers") is not None:
        mcp_references_check(out)  # an update giving one of them is checked once merged (agents.services)
    if len(json.dumps(out, separators=(",", ":"))) > AGENT_CONFIG_MAX_BYTES:
        raise InvalidRequest(f"The agent's configuration must be at most {AGENT_CONFIG_MAX_BYTES} bytes of JSON.")
    return out, data.get("version")


def _execution_identity(value) -> dict:
    if not value or value["type"] == "service_account":
        return {"type": "service_account"}
    return {"type": "aws_role", "role_arn": value["role_arn"]}


# --- wire shapes -----------------------------------------------------------------------------


def agent_to_wire(agent, agent_version) -> dict:
    wire = agent_snapshot(agent_id=agent.id, version=agent_version.version, config=agent_version.config)
    wire["metadata"] = agent_version.config.get("metadata", {})
    wire["created_at"] = rfc3339(agent.created_at)
    wire["updated_at"] = rfc3339(agent_version.created_at)
    wire["archived_at"] = rfc3339(agent.archived_at)
    return wire


# --- response shapes (schema only: rendering is agent_to_wire; tests validate every response
# against the document these produce) --------------------------------------------------------


class ModelConfigOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    effort = EffortSerializer(required=False)
    speed = serializers.CharField(required=False)
    inference_geo = serializers.CharField(required=False)


class AgentOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["agent"])
    version = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    system = serializers.CharField(allow_null=True)
    model = ModelConfigOutputSerializer()
    tools = serializers.ListField(child=serializers.DictField())
    mcp_servers = serializers.ListField(child=serializers.DictField())
    skills = serializers.ListField(child=serializers.DictField())
    execution_identity = serializers.DictField()
    multiagent = serializers.DictField(allow_null=True)
    metadata = serializers.DictField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


AgentListOutputSerializer = page_output("AgentListOutputSerializer", AgentOutputSerializer)


SCOPES = ("organization", "account")


class UnrestrictedNetworkingSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["unrestricted"])


class LimitedNetworkingSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["limited"])
    allowed_hosts = Array(
        child=Text(max_length=HOST_MAX_CHARS), max_length=ALLOWED_HOSTS_MAX, required=False, allow_null=True
    )
    allow_mcp_servers = Bool(required=False)
    allow_package_managers = Bool(required=False)


def _package_list():
    return Array(
        child=Text(max_length=PACKAGE_MAX_CHARS), max_length=PACKAGES_PER_MANAGER_MAX, required=False, allow_null=True
    )


class PackagesSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["packages"], required=False)
    apt = _package_list()
    cargo = _package_list()
    gem = _package_list()
    go = _package_list()
    npm = _package_list()
    pip = _package_list()


class CloudConfigSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["cloud"])
    networking = TypedUnion(
        choices={"unrestricted": UnrestrictedNetworkingSerializer, "limited": LimitedNetworkingSerializer},
        required=False,
        allow_null=True,
    )
    packages = PackagesSerializer(required=False, allow_null=True)


class SelfHostedConfigSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["self_hosted"])


ENVIRONMENT_CONFIG_TYPES = {"cloud": CloudConfigSerializer, "self_hosted": SelfHostedConfigSerializer}


class _ConfigBody(InputSerializer):
    config = TypedUnion(choices=ENVIRONMENT_CONFIG_TYPES, required=False, allow_null=True)


def parse_environment_config(value) -> dict | None:
    """A validated environment config as sent (None when omitted); the service resolves it
    against the stored one (agents.configs.environment_config_resolve)."""
    return validated(_ConfigBody, {"config": value}).get("config")


class EnvironmentCreateInputSerializer(InputSerializer):
    name = Text(max_length=ENVIRONMENT_NAME_MAX_CHARS)
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    config = TypedUnion(choices=ENVIRONMENT_CONFIG_TYPES, required=False, allow_null=True)
    metadata = Metadata()
    scope = serializers.ChoiceField(choices=SCOPES, required=False, allow_null=True)

    def validate_scope(self, value):
        # No silent drop: Mango's environments are visible to the whole workspace, as an API
        # organization's, for which the SDK says `account` is rejected.
        if value == "account":
            raise serializers.ValidationError(
                "'account' cannot be honoured: an environment is visible to its whole workspace (send organization)."
            )
        return value


class EnvironmentUpdateInputSerializer(EnvironmentCreateInputSerializer):
    """Given fields change; `config` merges into the stored one; metadata is a patch."""

    name = Text(max_length=ENVIRONMENT_NAME_MAX_CHARS, required=False, allow_null=True)
    metadata = Metadata(allow_null_values=True)


def parse_environment_create(body) -> dict:
    data = validated(EnvironmentCreateInputSerializer, body)
    return {
        "name": data["name"],
        "description": data.get("description"),
        "config": environment_config_resolve(
            parse_environment_config(body.get("config") if isinstance(body, dict) else None)
        ),
        "metadata": data.get("metadata") or {},
        "scope": data.get("scope"),
    }


def parse_environment_changes(body) -> dict:
    """The changes of an update; `config` validated but not resolved (the service merges it into
    the stored config under the row lock)."""
    data = validated(EnvironmentUpdateInputSerializer, body)
    changes = {key: data[key] for key in ("description", "scope") if key in data}
    if data.get("name") is not None:
        changes["name"] = data["name"]
    if "config" in data:
        changes["config"] = parse_environment_config(body["config"])
    if "metadata" in data:
        changes["metadata"] = data["metadata"] or {}
    return changes


def environment_to_wire(environment) -> dict:
    return {
        "id": environment.id,
        "type": "environment",
        "name": environment.name,
        "description": environment.description,
        "config": environment.config,
        "metadata": environment.metadata,
        "scope": environment.scope,
        "created_at": rfc3339(environment.created_at),
        "updated_at": rfc3339(environment.updated_at),
        "archived_at": rfc3339(environment.archived_at),
    }


# --- response shapes (schema only: rendering is environment_to_wire) --------------------------


class EnvironmentOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["environment"])
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    config = serializers.DictField()
    metadata = serializers.DictField(child=serializers.CharField())
    scope = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


EnvironmentListOutputSerializer = page_output("EnvironmentListOutputSerializer", EnvironmentOutputSerializer)
EnvironmentDeletedOutputSerializer = deleted_output("EnvironmentDeletedOutputSerializer", type="environment_deleted")
