"""Agents: input serializers (create, update) and the wire shape (api-contract.md §3). The SDK's
types are the ground truth for both."""

import json

from rest_framework import serializers

from agents.configs import agent_snapshot
from core.api import rfc3339
from core.errors import InvalidRequest
from core.limits import (
    AGENT_CONFIG_MAX_BYTES,
    DESCRIPTION_MAX_CHARS,
    ID_MAX_CHARS,
    MODEL_ID_MAX_CHARS,
    NAME_MAX_CHARS,
    SKILLS_MAX,
    SYSTEM_MAX_CHARS,
    Metadata,
)
from core.serializers import (
    Array,
    InputSerializer,
    Int,
    Object,
    StringOrObject,
    Text,
    TypedUnion,
    page_output,
    validated,
)
from sessions.serializers.tools import McpServersField, ToolsField

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
        if value is not None:
            raise serializers.ValidationError("not supported by this server.")
        return value


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
    tools, servers = out.get("tools"), out.get("mcp_servers")
    if tools is not None and servers is not None:
        referenced = {tool["mcp_server_name"] for tool in tools if tool["type"] == "mcp_toolset"}
        declared = {server["name"] for server in servers}
        if referenced - declared:
            raise InvalidRequest(f"tools: mcp_toolset names unknown mcp_servers: {sorted(referenced - declared)}.")
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
