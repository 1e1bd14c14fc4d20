"""Agent tools (the agent toolset, custom tools, MCP toolsets) and MCP servers: input
serializers shared by agents and sessions (api-contract.md §3; the SDK's types are the ground
truth)."""

import re

from rest_framework import serializers

from agents.configs import TOOLSET_TYPE
from core.limits import (
    HOST_MAX_CHARS,
    MCP_SERVERS_MAX,
    NAME_MAX_CHARS,
    TOOL_DESCRIPTION_MAX_CHARS,
    TOOL_OPTION_MAX_BYTES,
    TOOL_SCHEMA_MAX_BYTES,
    TOOL_SCHEMA_MAX_DEPTH,
    TOOLS_MAX,
    URL_MAX_CHARS,
)
from core.serializers import Array, Bool, FreeJson, InputSerializer, Int, Text, TypedUnion, validated

TOOLSET_TOOL_NAMES = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
PERMISSION_POLICIES = ("always_allow", "always_ask", "auto")
WEB_DOMAINS_MAX = 64  # allowed_domains / blocked_domains, as the SDK documents them
CUSTOM_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


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
    allowed_domains = Array(
        child=Text(max_length=HOST_MAX_CHARS), max_length=WEB_DOMAINS_MAX, required=False, allow_null=True
    )
    blocked_domains = Array(
        child=Text(max_length=HOST_MAX_CHARS), max_length=WEB_DOMAINS_MAX, required=False, allow_null=True
    )
    max_content_tokens = Int(min_value=1, required=False, allow_null=True)
    user_location = FreeJson(max_bytes=TOOL_OPTION_MAX_BYTES, max_depth=4, required=False, allow_null=True)
    url_sources = FreeJson(max_bytes=TOOL_OPTION_MAX_BYTES, max_depth=8, required=False, allow_null=True)

    def validate(self, data):
        # The SDK's rules for the web tools' lists: at most 64 entries, non-empty, not both.
        for key in ("allowed_domains", "blocked_domains"):
            if data.get(key) is not None and not data[key]:
                raise serializers.ValidationError({key: "must not be empty (omit it instead)."})
        if data.get("allowed_domains") is not None and data.get("blocked_domains") is not None:
            raise serializers.ValidationError({"blocked_domains": "cannot be given with allowed_domains."})
        return data

    def validate_url_sources(self, value):
        if value is not None:
            # No silent drop: the upstream's web_fetch has no such filter and this server does not fetch.
            raise serializers.ValidationError("cannot be enforced by this server; use allowed_domains/blocked_domains.")
        return value


WEB_TOOL_EXTRA_FIELDS = ("allowed_domains", "blocked_domains", "max_content_tokens", "user_location")


def _default_config(data: dict, *, policy: str) -> dict:
    """A toolset's `default_config` with its defaults filled in (enabled; `policy`)."""
    given = data.get("default_config") or {}
    return {
        "enabled": given.get("enabled", True),
        "permission_policy": dict(given.get("permission_policy") or {"type": policy}),
    }


def _resolved_config(config: dict, default: dict) -> dict:
    """One tool's `enabled` and `permission_policy`, falling back to the toolset's default."""
    return {
        "enabled": config.get("enabled", default["enabled"]),
        "permission_policy": dict(config.get("permission_policy") or default["permission_policy"]),
    }


WEB_TOOL_NAMES = ("web_fetch", "web_search")


def _web_tool_ask_refused(name: str, data: dict, given: dict[str, dict]) -> None:
    """No silent drop: the web tools run inside the model's own call upstream (server tools), so
    there is no moment to ask before one runs. `always_ask` on an enabled one is a 400 naming
    where it came from (the tool's config, or the toolset's default_config)."""
    message = (
        f"always_ask cannot be honoured for {name}: it runs inside the model call upstream, so there is no"
        f" moment to ask before it fetches. Give {name} permission_policy always_allow, or enabled: false."
    )
    for index, config in enumerate(data.get("configs") or []):
        if config["name"] == name and config.get("permission_policy"):
            raise serializers.ValidationError({"configs": {index: {"permission_policy": message}}})
    if name not in given or given[name].get("enabled") is not False:
        raise serializers.ValidationError({"default_config": {"permission_policy": message}})


class AgentToolsetSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=[TOOLSET_TYPE])
    default_config = ToolDefaultConfigSerializer(required=False, allow_null=True)
    configs = Array(
        child=ToolsetConfigSerializer(), max_length=len(TOOLSET_TOOL_NAMES), required=False, allow_null=True
    )

    def validate(self, data):
        default = _default_config(data, policy="always_allow")
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
            resolved = {"name": name, "type": name, **_resolved_config(config, default)}
            if name in ("web_fetch", "web_search"):
                for extra in WEB_TOOL_EXTRA_FIELDS:
                    if config.get(extra) is not None:
                        resolved[extra] = config[extra]
            configs.append(resolved)
            if name in WEB_TOOL_NAMES and resolved["enabled"] and resolved["permission_policy"]["type"] == "always_ask":
                _web_tool_ask_refused(name, data, given)
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
        default = _default_config(data, policy="always_ask")
        configs = [
            {"name": config["name"], **_resolved_config(config, default)} for config in data.get("configs") or []
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


# --- MCP servers -----------------------------------------------------------------------------


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
