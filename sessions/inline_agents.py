"""An inline agent's definition (the SDK's BetaManagedAgentsInlineAgent): an agent the
coordinator's model defines when it spawns a thread (sessions.runtime.threads) or in a workflow
run's plan (sessions.workflow_plan), not saved. It runs on the coordinator's model with its
built-in toolset and execution identity, the given name, system prompt and description, and, of
its own, those of the coordinator's MCP servers (each with its mcp_toolset: the session's vaults
give their credentials, as for the coordinator) and custom tools (answered by the client through
the session, as a roster agent's) that it names. Pure: no ORM."""

from agents.configs import TOOLSET_TYPE

NAME_MAX = 255
TEXT_MAX = 20_000


class InlineRefused(Exception):
    """The inline agent cannot be defined so (the message names the field, for the model)."""


def inline_template(snapshot: dict) -> dict:
    """What every inline agent of the coordinator `snapshot` starts from."""
    return {
        "type": "inline",
        "description": None,
        "system": None,
        "model": snapshot["model"],
        "tools": [tool for tool in snapshot.get("tools") or [] if tool.get("type") == TOOLSET_TYPE],
        "mcp_servers": [],
        "skills": [],
        "execution_identity": snapshot.get("execution_identity") or {"type": "service_account"},
    }


def inline_schema(coordinator: dict, description: str) -> dict:
    """The JSON schema of an `inline_agent` as the coordinator's model is offered it."""
    properties: dict = {"name": {"type": "string"}, "system": {"type": "string"}, "description": {"type": "string"}}
    servers = [server["name"] for server in coordinator.get("mcp_servers") or []]
    custom = [tool["name"] for tool in coordinator.get("tools") or [] if tool.get("type") == "custom"]
    if servers:
        properties["mcp_servers"] = {
            "type": "array",
            "items": {"type": "string", "enum": servers},
            "description": "Your MCP servers to give it (their tools).",
        }
    if custom:
        properties["custom_tools"] = {
            "type": "array",
            "items": {"type": "string", "enum": custom},
            "description": "Your custom tools to give it.",
        }
    return {"type": "object", "description": description, "properties": properties, "required": ["system"]}


def _text(value, field: str, *, required: bool, limit: int = NAME_MAX) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise InlineRefused(f"{field}: a non-empty string of at most {limit} characters is required.")
    return value


def _names(value, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise InlineRefused(f"{field}: an array of names is required.")
    return list(dict.fromkeys(value))


def inline_definition(spec, *, template: dict, coordinator: dict, field: str) -> dict:
    """The definition of the inline agent `spec` ({name?, system, description?, mcp_servers?,
    custom_tools?}) from `template` (inline_template) and the coordinator's definition. Raises
    InlineRefused naming the field."""
    if not isinstance(spec, dict):
        raise InlineRefused(f"{field}: an object with a non-empty system prompt is required.")
    system = _text(spec.get("system"), f"{field}.system", required=True, limit=TEXT_MAX)
    name = _text(spec.get("name"), f"{field}.name", required=False) or "inline"
    description = _text(spec.get("description"), f"{field}.description", required=False, limit=TEXT_MAX)
    tools, servers = list(template["tools"]), []
    offered = {server["name"]: server for server in coordinator.get("mcp_servers") or []}
    for index, server in enumerate(_names(spec.get("mcp_servers"), f"{field}.mcp_servers")):
        if server not in offered:
            listed = ", ".join(repr(name) for name in offered) or "none"
            raise InlineRefused(f"{field}.mcp_servers[{index}]: you have no MCP server {server[:64]!r} ({listed}).")
        servers.append(offered[server])
        tools += [
            tool
            for tool in coordinator.get("tools") or []
            if tool.get("type") == "mcp_toolset" and tool.get("mcp_server_name") == server
        ]
    custom = {tool["name"]: tool for tool in coordinator.get("tools") or [] if tool.get("type") == "custom"}
    for index, tool in enumerate(_names(spec.get("custom_tools"), f"{field}.custom_tools")):
        if tool not in custom:
            listed = ", ".join(repr(name) for name in custom) or "none"
            raise InlineRefused(f"{field}.custom_tools[{index}]: you have no custom tool {tool[:64]!r} ({listed}).")
        tools.append(custom[tool])
    return {
        **template,
        "name": name,
        "system": system,
        "description": description,
        "tools": tools,
        "mcp_servers": servers,
    }
