"""Wire shapes for agents, environments, sessions and events (api-contract.md §3, §4, §6, §7).

`parse_*` validate request bodies and return normalised dicts (raising InvalidRequest);
`*_to_wire` render rows. The shapes follow the official SDK's types, which are the ground truth.
"""

import re
from datetime import datetime

from django.utils import timezone

from core.errors import InvalidRequest

TOOLSET_TYPE = "agent_toolset_20260401"
TOOLSET_TOOL_NAMES = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
WEB_TOOL_EXTRA_FIELDS = ("allowed_domains", "blocked_domains", "max_content_tokens", "url_sources")
PERMISSION_POLICIES = ("always_allow", "always_ask", "auto")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
CUSTOM_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
SESSION_STATUSES = ("idle", "running", "rescheduling", "terminated")

USER_EVENT_TYPES = (
    "user.message",
    "user.interrupt",
    "user.tool_confirmation",
    "user.custom_tool_result",
    "user.tool_result",
    "user.define_outcome",
    "system.message",
)
INITIAL_EVENT_TYPES = ("user.message", "user.define_outcome")
MAX_INITIAL_EVENTS = 50
# Client events whose object types processed_at as a required datetime (not nullable).
PROCESSED_AT_REQUIRED = ("user.define_outcome",)


def ts(value: datetime | None) -> str | None:
    """RFC 3339 with a `Z`, as the SDK parses it."""
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


# --- generic field checks --------------------------------------------------------------------


def _require_dict(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: must be an object.")
    return value


def _require_str(value, field: str, *, allow_empty: bool = False, max_length: int | None = None) -> str:
    if not isinstance(value, str) or (not allow_empty and not value):
        raise InvalidRequest(f"{field}: must be a non-empty string.")
    if max_length is not None and len(value) > max_length:
        raise InvalidRequest(f"{field}: must be at most {max_length} characters.")
    return value


def _optional_str(body: dict, key: str, *, max_length: int | None = None) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    return _require_str(value, key, allow_empty=True, max_length=max_length)


def _require_list(value, field: str) -> list:
    if not isinstance(value, list):
        raise InvalidRequest(f"{field}: must be an array.")
    return value


def _bool(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{field}: must be a boolean.")
    return value


def parse_metadata(value, *, field: str = "metadata", allow_null_values: bool = False) -> dict:
    """At most 16 pairs, keys ≤ 64 characters, values ≤ 512. With allow_null_values (a patch),
    a null value means "delete this key"."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: must be an object of strings.", code="invalid_metadata")
    if len(value) > 16:
        raise InvalidRequest(f"{field}: at most 16 keys.", code="invalid_metadata")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise InvalidRequest(f"{field}: keys must be 1-64 characters.", code="invalid_metadata")
        if item is None and allow_null_values:
            continue
        if not isinstance(item, str) or len(item) > 512:
            raise InvalidRequest(
                f"{field}.{key}: values must be strings of at most 512 characters.", code="invalid_metadata"
            )
    return dict(value)


def apply_metadata_patch(current: dict, patch: dict) -> dict:
    merged = dict(current)
    for key, value in patch.items():
        if value is None or value == "":
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > 16:
        raise InvalidRequest("metadata: at most 16 keys.", code="invalid_metadata")
    return merged


# --- agents ----------------------------------------------------------------------------------


def _parse_effort(value, field: str) -> dict:
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or value.get("type") not in EFFORTS:
        raise InvalidRequest(f"{field}: must be one of {', '.join(EFFORTS)}.")
    return {"type": value["type"]}


def parse_model(value) -> dict:
    """A model id string or `{id, effort?, speed?, inference_geo?}` → always the object form."""
    if isinstance(value, str):
        return {"id": _require_str(value, "model")}
    body = _require_dict(value, "model")
    model = {"id": _require_str(body.get("id"), "model.id")}
    if body.get("effort") is not None:
        model["effort"] = _parse_effort(body["effort"], "model.effort")
    if body.get("speed") is not None:
        if body["speed"] not in ("standard", "fast"):
            raise InvalidRequest("model.speed: must be standard or fast.")
        model["speed"] = body["speed"]
    if body.get("inference_geo") is not None:
        model["inference_geo"] = _require_str(body["inference_geo"], "model.inference_geo")
    return model


def _parse_permission_policy(value, field: str) -> dict:
    body = _require_dict(value, field)
    if body.get("type") not in PERMISSION_POLICIES:
        raise InvalidRequest(f"{field}.type: must be one of {', '.join(PERMISSION_POLICIES)}.")
    return {"type": body["type"]}


def _parse_toolset(tool: dict, index: int) -> dict:
    field = f"tools[{index}]"
    default_raw = tool.get("default_config") or {}
    _require_dict(default_raw, f"{field}.default_config")
    default = {
        "enabled": _bool(default_raw.get("enabled", True), f"{field}.default_config.enabled"),
        "permission_policy": _parse_permission_policy(
            default_raw.get("permission_policy") or {"type": "always_allow"},
            f"{field}.default_config.permission_policy",
        ),
    }
    given: dict[str, dict] = {}
    for j, config in enumerate(_require_list(tool.get("configs") or [], f"{field}.configs")):
        config = _require_dict(config, f"{field}.configs[{j}]")
        name = config.get("name")
        if name not in TOOLSET_TOOL_NAMES:
            raise InvalidRequest(f"{field}.configs[{j}].name: must be one of {', '.join(TOOLSET_TOOL_NAMES)}.")
        if name in given:
            raise InvalidRequest(f"{field}.configs[{j}].name: {name!r} is configured twice.")
        given[name] = config
    configs = []
    for name in TOOLSET_TOOL_NAMES:
        config = given.get(name, {})
        resolved = {
            "name": name,
            "type": name,
            "enabled": _bool(config.get("enabled", default["enabled"]), f"{field}.configs.{name}.enabled"),
            "permission_policy": (
                _parse_permission_policy(config["permission_policy"], f"{field}.configs.{name}.permission_policy")
                if config.get("permission_policy")
                else dict(default["permission_policy"])
            ),
        }
        if name in ("web_fetch", "web_search"):
            for extra in WEB_TOOL_EXTRA_FIELDS:
                if config.get(extra) is not None:
                    resolved[extra] = config[extra]
        configs.append(resolved)
    return {"type": TOOLSET_TYPE, "configs": configs, "default_config": default}


def _parse_custom_tool(tool: dict, index: int) -> dict:
    field = f"tools[{index}]"
    name = tool.get("name")
    if not isinstance(name, str) or not CUSTOM_TOOL_NAME.match(name):
        raise InvalidRequest(f"{field}.name: 1-128 characters of letters, digits, _ and -.")
    description = _require_str(tool.get("description"), f"{field}.description", allow_empty=True)
    schema = _require_dict(tool.get("input_schema"), f"{field}.input_schema")
    if schema.get("type") != "object":
        raise InvalidRequest(f"{field}.input_schema.type: must be 'object'.")
    return {"type": "custom", "name": name, "description": description, "input_schema": schema}


def _parse_mcp_toolset(tool: dict, index: int) -> dict:
    field = f"tools[{index}]"
    default_raw = _require_dict(tool.get("default_config") or {}, f"{field}.default_config")
    configs = []
    for j, config in enumerate(_require_list(tool.get("configs") or [], f"{field}.configs")):
        config = _require_dict(config, f"{field}.configs[{j}]")
        entry = {"name": _require_str(config.get("name"), f"{field}.configs[{j}].name")}
        entry["enabled"] = _bool(config.get("enabled", default_raw.get("enabled", True)), f"{field}.configs.enabled")
        entry["permission_policy"] = _parse_permission_policy(
            config.get("permission_policy") or default_raw.get("permission_policy") or {"type": "always_ask"},
            f"{field}.configs[{j}].permission_policy",
        )
        configs.append(entry)
    return {
        "type": "mcp_toolset",
        "mcp_server_name": _require_str(tool.get("mcp_server_name"), f"{field}.mcp_server_name"),
        "configs": configs,
        "default_config": {
            "enabled": _bool(default_raw.get("enabled", True), f"{field}.default_config.enabled"),
            "permission_policy": _parse_permission_policy(
                default_raw.get("permission_policy") or {"type": "always_ask"},
                f"{field}.default_config.permission_policy",
            ),
        },
    }


def parse_tools(value) -> list[dict]:
    tools = _require_list(value or [], "tools")
    if len(tools) > 256:
        raise InvalidRequest("tools: at most 256 tools.")
    parsed, names = [], set()
    for index, tool in enumerate(tools):
        tool = _require_dict(tool, f"tools[{index}]")
        kind = tool.get("type")
        if kind == TOOLSET_TYPE:
            parsed.append(_parse_toolset(tool, index))
        elif kind == "custom":
            custom = _parse_custom_tool(tool, index)
            if custom["name"] in names or custom["name"] in TOOLSET_TOOL_NAMES:
                raise InvalidRequest(f"tools[{index}].name: {custom['name']!r} is already used by another tool.")
            names.add(custom["name"])
            parsed.append(custom)
        elif kind == "mcp_toolset":
            parsed.append(_parse_mcp_toolset(tool, index))
        else:
            raise InvalidRequest(f"tools[{index}].type: must be {TOOLSET_TYPE}, mcp_toolset or custom.")
    if sum(1 for tool in parsed if tool["type"] == TOOLSET_TYPE) > 1:
        raise InvalidRequest(f"tools: {TOOLSET_TYPE} may appear once.")
    return parsed


def _parse_mcp_servers(value) -> list[dict]:
    servers = _require_list(value or [], "mcp_servers")
    if len(servers) > 20:
        raise InvalidRequest("mcp_servers: at most 20.")
    out, names = [], set()
    for index, server in enumerate(servers):
        server = _require_dict(server, f"mcp_servers[{index}]")
        if server.get("type") != "url":
            raise InvalidRequest(f"mcp_servers[{index}].type: must be 'url'.")
        name = _require_str(server.get("name"), f"mcp_servers[{index}].name", max_length=255)
        if name in names:
            raise InvalidRequest(f"mcp_servers[{index}].name: {name!r} is not unique.")
        names.add(name)
        out.append({"type": "url", "name": name, "url": _require_str(server.get("url"), f"mcp_servers[{index}].url")})
    return out


def _parse_skills(value) -> list[dict]:
    out = []
    for index, skill in enumerate(_require_list(value or [], "skills")):
        skill = _require_dict(skill, f"skills[{index}]")
        if skill.get("type") not in ("anthropic", "custom"):
            raise InvalidRequest(f"skills[{index}].type: must be anthropic or custom.")
        out.append(
            {
                "type": skill["type"],
                "skill_id": _require_str(skill.get("skill_id"), f"skills[{index}].skill_id"),
                "version": str(skill.get("version") or "latest"),
            }
        )
    return out


def _parse_execution_identity(value) -> dict:
    if value is None:
        return {"type": "service_account"}
    body = _require_dict(value, "execution_identity")
    if body.get("type") == "service_account":
        return {"type": "service_account"}
    if body.get("type") == "aws_role":
        return {"type": "aws_role", "role_arn": _require_str(body.get("role_arn"), "execution_identity.role_arn")}
    raise InvalidRequest("execution_identity.type: must be service_account or aws_role.")


AGENT_FIELDS = ("name", "model", "system", "description", "tools", "mcp_servers", "skills", "metadata")


def parse_agent_fields(body: dict, *, partial: bool) -> dict:
    """Agent create (partial=False) or update (partial=True) body → config fields to store.
    On update each given field replaces the stored one, except metadata (a patch, applied later)."""
    body = _require_dict(body, "body")
    out: dict = {}
    if not partial or "name" in body:
        out["name"] = _require_str(body.get("name"), "name", max_length=256)
    if not partial or "model" in body:
        if body.get("model") is None:
            raise InvalidRequest("model: required.")
        out["model"] = parse_model(body["model"])
    for key in ("system", "description"):
        if not partial or key in body:
            out[key] = _optional_str(body, key)
    if not partial or "tools" in body:
        out["tools"] = parse_tools(body.get("tools"))
    if not partial or "mcp_servers" in body:
        out["mcp_servers"] = _parse_mcp_servers(body.get("mcp_servers"))
    if not partial or "skills" in body:
        out["skills"] = _parse_skills(body.get("skills"))
    if not partial or "execution_identity" in body:
        out["execution_identity"] = _parse_execution_identity(body.get("execution_identity"))
    if not partial or "multiagent" in body:
        if body.get("multiagent") is not None:
            raise InvalidRequest("multiagent: not supported by this server.")
        out["multiagent"] = None
    if not partial or "metadata" in body:
        out["metadata"] = parse_metadata(body.get("metadata"), allow_null_values=partial)
    tools = out.get("tools")
    servers = out.get("mcp_servers")
    if tools is not None and servers is not None:
        referenced = {tool["mcp_server_name"] for tool in tools if tool["type"] == "mcp_toolset"}
        declared = {server["name"] for server in servers}
        if referenced - declared:
            raise InvalidRequest(f"tools: mcp_toolset names unknown mcp_servers: {sorted(referenced - declared)}.")
    return out


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
    wire["created_at"] = ts(agent.created_at)
    wire["updated_at"] = ts(agent_version.created_at)
    wire["archived_at"] = ts(agent.archived_at)
    return wire


# --- environments ----------------------------------------------------------------------------

PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")


def _parse_networking(value, current: dict | None) -> dict:
    if value is None:
        return current or {
            "type": "limited",
            "allowed_hosts": [],
            "allow_mcp_servers": False,
            "allow_package_managers": False,
        }
    body = _require_dict(value, "config.networking")
    if body.get("type") == "unrestricted":
        return {"type": "unrestricted"}
    if body.get("type") == "limited":
        hosts = _require_list(body.get("allowed_hosts") or [], "config.networking.allowed_hosts")
        return {
            "type": "limited",
            "allowed_hosts": [_require_str(host, "config.networking.allowed_hosts[]") for host in hosts],
            "allow_mcp_servers": _bool(body.get("allow_mcp_servers", False), "config.networking.allow_mcp_servers"),
            "allow_package_managers": _bool(
                body.get("allow_package_managers", False), "config.networking.allow_package_managers"
            ),
        }
    raise InvalidRequest("config.networking.type: must be unrestricted or limited.")


def _parse_packages(value, current: dict | None) -> dict:
    if value is None:
        return current or {"type": "packages", **{manager: [] for manager in PACKAGE_MANAGERS}}
    body = _require_dict(value, "config.packages")
    out = {"type": "packages"}
    for manager in PACKAGE_MANAGERS:
        items = _require_list(body.get(manager) or [], f"config.packages.{manager}")
        out[manager] = [_require_str(item, f"config.packages.{manager}[]") for item in items]
    return out


def parse_environment_config(value, current: dict | None = None) -> dict:
    """Resolve an environment config. Omitted networking/packages keep `current` (update)."""
    if value is None:
        return current or {
            "type": "cloud",
            "networking": _parse_networking(None, None),
            "packages": _parse_packages(None, None),
        }
    body = _require_dict(value, "config")
    kind = body.get("type")
    if kind not in ("cloud", "self_hosted"):
        raise InvalidRequest("config.type: must be cloud or self_hosted.")
    if current is not None and current.get("type") != kind:
        raise InvalidRequest("config.type: an environment cannot change type.", code="invalid_config_type_change")
    if kind == "self_hosted":
        return {"type": "self_hosted"}
    current = current or {}
    networking = _parse_networking(body.get("networking"), current.get("networking"))
    packages = _parse_packages(body.get("packages"), current.get("packages"))
    has_packages = any(packages[manager] for manager in PACKAGE_MANAGERS)
    if has_packages and networking["type"] == "limited" and not networking["allow_package_managers"]:
        raise InvalidRequest("config.packages: limited networking needs allow_package_managers to install packages.")
    return {"type": "cloud", "networking": networking, "packages": packages}


def environment_to_wire(environment) -> dict:
    return {
        "id": environment.id,
        "type": "environment",
        "name": environment.name,
        "description": environment.description,
        "config": environment.config,
        "metadata": environment.metadata,
        "scope": environment.scope,
        "created_at": ts(environment.created_at),
        "updated_at": ts(environment.updated_at),
        "archived_at": ts(environment.archived_at),
    }


# --- events ----------------------------------------------------------------------------------

_MESSAGE_BLOCK_TYPES = ("text", "image", "document", "redacted")
_RESULT_BLOCK_TYPES = ("text", "image", "document", "search_result")


def _parse_blocks(value, field: str, allowed: tuple[str, ...], *, required: bool) -> list[dict] | None:
    if value is None and not required:
        return None
    blocks = _require_list(value, field)
    if required and not blocks:
        raise InvalidRequest(f"{field}: must not be empty.")
    out = []
    for index, block in enumerate(blocks):
        block = _require_dict(block, f"{field}[{index}]")
        if block.get("type") not in allowed:
            raise InvalidRequest(f"{field}[{index}].type: must be one of {', '.join(allowed)}.")
        if block["type"] == "text":
            _require_str(block.get("text"), f"{field}[{index}].text", allow_empty=True)
        elif block["type"] in ("image", "document"):
            _require_dict(block.get("source"), f"{field}[{index}].source")
        out.append(block)
    return out


def parse_event_param(value, index: int, *, allowed: tuple[str, ...] = USER_EVENT_TYPES) -> dict:
    """One event param → {"type", "payload"} (payload is the public body minus id/type)."""
    field = f"events[{index}]"
    body = _require_dict(value, field)
    kind = body.get("type")
    if kind not in allowed:
        raise InvalidRequest(f"{field}.type: must be one of {', '.join(allowed)}.")
    if kind == "user.message":
        return {
            "type": kind,
            "payload": {
                "content": _parse_blocks(body.get("content"), f"{field}.content", _MESSAGE_BLOCK_TYPES, required=True)
            },
        }
    if kind == "system.message":
        return {
            "type": kind,
            "payload": {"content": _parse_blocks(body.get("content"), f"{field}.content", ("text",), required=True)},
        }
    if kind == "user.interrupt":
        payload = {}
        if body.get("session_thread_id") is not None:
            payload["session_thread_id"] = _require_str(body["session_thread_id"], f"{field}.session_thread_id")
        return {"type": kind, "payload": payload}
    if kind == "user.tool_confirmation":
        if body.get("result") not in ("allow", "deny"):
            raise InvalidRequest(f"{field}.result: must be allow or deny.")
        payload = {
            "tool_use_id": _require_str(body.get("tool_use_id"), f"{field}.tool_use_id"),
            "result": body["result"],
        }
        if body.get("deny_message") is not None:
            if body["result"] != "deny":
                raise InvalidRequest(f"{field}.deny_message: only with result 'deny'.")
            payload["deny_message"] = _require_str(body["deny_message"], f"{field}.deny_message", allow_empty=True)
        return {"type": kind, "payload": payload}
    if kind in ("user.custom_tool_result", "user.tool_result"):
        id_key = "custom_tool_use_id" if kind == "user.custom_tool_result" else "tool_use_id"
        payload = {id_key: _require_str(body.get(id_key), f"{field}.{id_key}")}
        content = _parse_blocks(body.get("content"), f"{field}.content", _RESULT_BLOCK_TYPES, required=False)
        if content is not None:
            payload["content"] = content
        if body.get("is_error") is not None:
            payload["is_error"] = _bool(body["is_error"], f"{field}.is_error")
        return {"type": kind, "payload": payload}
    if kind == "user.define_outcome":
        rubric = _require_dict(body.get("rubric"), f"{field}.rubric")
        if rubric.get("type") == "text":
            rubric = {
                "type": "text",
                "content": _require_str(rubric.get("content"), f"{field}.rubric.content", max_length=262144),
            }
        elif rubric.get("type") == "file":
            rubric = {"type": "file", "file_id": _require_str(rubric.get("file_id"), f"{field}.rubric.file_id")}
        else:
            raise InvalidRequest(f"{field}.rubric.type: must be text or file.")
        max_iterations = body.get("max_iterations")
        if max_iterations is not None and (not isinstance(max_iterations, int) or not 1 <= max_iterations <= 20):
            raise InvalidRequest(f"{field}.max_iterations: must be an integer from 1 to 20.")
        return {
            "type": kind,
            "payload": {
                "description": _require_str(body.get("description"), f"{field}.description", allow_empty=True),
                "rubric": rubric,
                "max_iterations": max_iterations,
            },
        }
    raise InvalidRequest(f"{field}.type: unsupported.")  # pragma: no cover


def parse_events(value, *, field: str = "events", allowed=USER_EVENT_TYPES, maximum: int | None = None) -> list[dict]:
    events = _require_list(value, field)
    if maximum is not None and len(events) > maximum:
        raise InvalidRequest(f"{field}: at most {maximum} events.")
    return [parse_event_param(event, index, allowed=allowed) for index, event in enumerate(events)]


def event_to_wire(event) -> dict:
    wire = {"id": event.id, "type": event.type, **event.payload}
    processed_at = event.processed_at
    if processed_at is None and event.type in PROCESSED_AT_REQUIRED:
        processed_at = event.created_at
    wire["processed_at"] = ts(processed_at)
    return wire


# --- sessions --------------------------------------------------------------------------------


def resource_to_wire(resource) -> dict:
    return {
        "id": resource.id,
        "type": "file",
        "file_id": resource.file_id,
        "mount_path": resource.mount_path,
        "created_at": ts(resource.created_at),
        "updated_at": ts(resource.updated_at),
    }


def session_to_wire(session, *, resources: list | None = None, outcome_evaluations: list | None = None) -> dict:
    usage = dict(session.usage or {})
    return {
        "id": session.id,
        "type": "session",
        "status": session.status,
        "agent": session.agent_snapshot,
        "environment_id": session.environment_id,
        "resources": resources if resources is not None else [],
        "metadata": session.metadata,
        "title": session.title,
        "created_at": ts(session.created_at),
        "updated_at": ts(session.updated_at),
        "archived_at": ts(session.archived_at),
        "budget": None,
        "outcome_evaluations": [
            {**evaluation, "completed_at": ts(evaluation["completed_at"])} for evaluation in outcome_evaluations or []
        ],
        "stats": {
            "active_seconds": round(session.active_seconds, 3),
            "duration_seconds": round((timezone.now() - session.created_at).total_seconds(), 3),
        },
        "usage": usage,
        "vault_ids": [],
        "deployment_id": None,
    }
