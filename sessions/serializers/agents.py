"""Agents: input serializers (create, update) and the wire shape (api-contract.md §3). The SDK's
types are the ground truth for both."""

import json
import re

from rest_framework import serializers

from core.api import rfc3339
from core.errors import InvalidRequest
from core.serializers import (
    Array,
    Bool,
    FreeJson,
    InputSerializer,
    Int,
    Object,
    StringOrObject,
    Text,
    TypedUnion,
    validated,
)
from sessions.events import TOOLSET_TYPE
from sessions.serializers.common import (
    AGENT_CONFIG_MAX_BYTES,
    DESCRIPTION_MAX_CHARS,
    HOST_MAX_CHARS,
    ID_MAX_CHARS,
    MCP_SERVERS_MAX,
    MODEL_ID_MAX_CHARS,
    NAME_MAX_CHARS,
    SKILLS_MAX,
    SYSTEM_MAX_CHARS,
    TOOL_DESCRIPTION_MAX_CHARS,
    TOOL_OPTION_MAX_BYTES,
    TOOL_SCHEMA_MAX_BYTES,
    TOOL_SCHEMA_MAX_DEPTH,
    TOOLS_MAX,
    URL_MAX_CHARS,
    Metadata,
)

TOOLSET_TOOL_NAMES = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
PERMISSION_POLICIES = ("always_allow", "always_ask", "auto")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
CUSTOM_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


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


# --- tools -----------------------------------------------------------------------------------


class PermissionPolicySerializer(InputSerializer):
    type = serializers.ChoiceField(choices=PERMISSION_POLICIES)


class ToolDefaultConfigSerializer(InputSerializer):
    enabled = Bool(required=False)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)


class ToolsetConfigSerializer(InputSerializer):
    name = serializers.ChoiceField(choices=TOOLSET_TOOL_NAMES)
    enabled = Bool(required=False)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)
    # web_fetch / web_search options, stored as given.
    allowed_domains = Array(child=Text(max_length=HOST_MAX_CHARS), max_length=256, required=False, allow_null=True)
    blocked_domains = Array(child=Text(max_length=HOST_MAX_CHARS), max_length=256, required=False, allow_null=True)
    max_content_tokens = Int(min_value=1, required=False, allow_null=True)
    url_sources = FreeJson(max_bytes=TOOL_OPTION_MAX_BYTES, max_depth=8, required=False, allow_null=True)


WEB_TOOL_EXTRA_FIELDS = ("allowed_domains", "blocked_domains", "max_content_tokens", "url_sources")


class AgentToolsetSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=[TOOLSET_TYPE])
    default_config = ToolDefaultConfigSerializer(required=False, allow_null=True)
    configs = Array(
        child=ToolsetConfigSerializer(), max_length=len(TOOLSET_TOOL_NAMES), required=False, allow_null=True
    )

    def validate(self, data):
        default_raw = data.get("default_config") or {}
        default = {
            "enabled": default_raw.get("enabled", True),
            "permission_policy": dict(default_raw.get("permission_policy") or {"type": "always_allow"}),
        }
        given: dict[str, dict] = {}
        for index, config in enumerate(data.get("configs") or []):
            if config["name"] in given:
                raise serializers.ValidationError(
                    {"configs": {index: {"name": f"{config['name']!r} is configured twice."}}}
                )
            given[config["name"]] = config
        configs = []
        for name in TOOLSET_TOOL_NAMES:
            config = given.get(name, {})
            resolved = {
                "name": name,
                "type": name,
                "enabled": config.get("enabled", default["enabled"]),
                "permission_policy": dict(config.get("permission_policy") or default["permission_policy"]),
            }
            if name in ("web_fetch", "web_search"):
                for extra in WEB_TOOL_EXTRA_FIELDS:
                    if config.get(extra) is not None:
                        resolved[extra] = config[extra]
            configs.append(resolved)
        return {"type": TOOLSET_TYPE, "configs": configs, "default_config": default}


class CustomToolSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["custom"])
    name = serializers.RegexField(
        CUSTOM_TOOL_NAME, error_messages={"invalid": "1-128 characters of letters, digits, _ and -."}
    )
    description = Text(max_length=TOOL_DESCRIPTION_MAX_CHARS, allow_blank=True)
    input_schema = FreeJson(max_bytes=TOOL_SCHEMA_MAX_BYTES, max_depth=TOOL_SCHEMA_MAX_DEPTH, object_only=True)

    def validate_input_schema(self, schema):
        if schema.get("type") != "object":
            raise serializers.ValidationError("type: must be 'object'.")
        return schema

    def validate(self, data):
        return {
            "type": "custom",
            "name": data["name"],
            "description": data["description"],
            "input_schema": data["input_schema"],
        }


class McpToolConfigSerializer(InputSerializer):
    name = Text(max_length=NAME_MAX_CHARS)
    enabled = Bool(required=False)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)


class McpToolsetSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["mcp_toolset"])
    mcp_server_name = Text(max_length=NAME_MAX_CHARS)
    default_config = ToolDefaultConfigSerializer(required=False, allow_null=True)
    configs = Array(child=McpToolConfigSerializer(), max_length=TOOLS_MAX, required=False, allow_null=True)

    def validate(self, data):
        default_raw = data.get("default_config") or {}
        default = {
            "enabled": default_raw.get("enabled", True),
            "permission_policy": dict(default_raw.get("permission_policy") or {"type": "always_ask"}),
        }
        configs = [
            {
                "name": config["name"],
                "enabled": config.get("enabled", default["enabled"]),
                "permission_policy": dict(config.get("permission_policy") or default["permission_policy"]),
            }
            for config in data.get("configs") or []
        ]
        return {
            "type": "mcp_toolset",
            "mcp_server_name": data["mcp_server_name"],
            "configs": configs,
            "default_config": default,
        }


TOOL_TYPES = {TOOLSET_TYPE: AgentToolsetSerializer, "mcp_toolset": McpToolsetSerializer, "custom": CustomToolSerializer}


class ToolsField(Array):
    """The `tools` array: at most 256; one agent toolset; custom tool names unique."""

    def __init__(self, **kwargs):
        super().__init__(child=TypedUnion(choices=TOOL_TYPES), max_length=TOOLS_MAX, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        tools = super().to_internal_value(data)
        names = set()
        for index, tool in enumerate(tools):
            if tool["type"] == "custom":
                if tool["name"] in names or tool["name"] in TOOLSET_TOOL_NAMES:
                    raise serializers.ValidationError(
                        {index: {"name": f"{tool['name']!r} is already used by another tool."}}
                    )
                names.add(tool["name"])
        if sum(1 for tool in tools if tool["type"] == TOOLSET_TYPE) > 1:
            raise serializers.ValidationError(f"{TOOLSET_TYPE} may appear once.")
        return tools


class _ToolsBody(InputSerializer):
    tools = ToolsField(required=False)


def parse_tools(value) -> list[dict]:
    return validated(_ToolsBody, {"tools": value}).get("tools") or []


# --- MCP servers, skills, identity -----------------------------------------------------------


class McpServerSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["url"])
    name = Text(max_length=255)
    url = Text(max_length=URL_MAX_CHARS)


class McpServersField(Array):
    def __init__(self, **kwargs):
        super().__init__(child=McpServerSerializer(), max_length=MCP_SERVERS_MAX, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        servers = super().to_internal_value(data)
        names = set()
        for index, server in enumerate(servers):
            if server["name"] in names:
                raise serializers.ValidationError({index: {"name": f"{server['name']!r} is not unique."}})
            names.add(server["name"])
        return [{"type": "url", "name": server["name"], "url": server["url"]} for server in servers]


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


def agent_config_to_wire(*, agent_id: str, version: int, config: dict) -> dict:
    """The SessionAgent shape: the agent's resolved configuration at one version."""
    return {
        "id": agent_id,
        "type": "agent",
        "version": version,
        "name": config["name"],
        "description": config.get("description"),
        "system": config.get("system"),
        "model": config["model"],
        "tools": config.get("tools", []),
        "mcp_servers": config.get("mcp_servers", []),
        "skills": config.get("skills", []),
        "execution_identity": config.get("execution_identity") or {"type": "service_account"},
        "multiagent": config.get("multiagent"),
    }


def agent_to_wire(agent, agent_version) -> dict:
    wire = agent_config_to_wire(agent_id=agent.id, version=agent_version.version, config=agent_version.config)
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


class AgentListOutputSerializer(serializers.Serializer):
    data = AgentOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)
