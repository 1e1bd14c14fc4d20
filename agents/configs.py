"""Pure rules on stored agent and environment configuration, shared by serializers (the API's
parsing and rendering) and services (which apply them under a row lock): the agent snapshot a
session keeps and the merge of an environment config into the stored one. No ORM, no serializer."""

from core.errors import InvalidRequest
from sandboxes.packages import refusal as package_refusal

# The built-in toolset's type, as agents name it in `tools`.
TOOLSET_TYPE = "agent_toolset_20260401"
PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")


def mcp_references_check(config: dict, *, field: str = "") -> None:
    """Every mcp_toolset names one of the agent's mcp_servers, and every server is named by a
    toolset (as the SDK documents: an unreferenced server is rejected, not stored idle)."""
    declared = [server["name"] for server in config.get("mcp_servers") or []]
    referenced = {tool["mcp_server_name"] for tool in config.get("tools") or [] if tool.get("type") == "mcp_toolset"}
    unknown = sorted(referenced - set(declared))
    if unknown:
        raise InvalidRequest(f"{field}tools: mcp_toolset names {unknown}, which is not in the agent's mcp_servers.")
    unused = [name for name in declared if name not in referenced]
    if unused:
        raise InvalidRequest(
            f"{field}mcp_servers: {unused} referenced by no mcp_toolset in tools; add an mcp_toolset for each server"
            " or remove it."
        )


def agent_snapshot(*, agent_id: str, version: int, config: dict) -> dict:
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


def _networking(value: dict | None, current: dict | None) -> dict:
    if value is None:
        return current or {
            "type": "limited",
            "allowed_hosts": [],
            "allow_mcp_servers": False,
            "allow_package_managers": False,
        }
    if value["type"] == "unrestricted":
        return {"type": "unrestricted"}
    return {
        "type": "limited",
        "allowed_hosts": list(value.get("allowed_hosts") or []),
        "allow_mcp_servers": value.get("allow_mcp_servers", False),
        "allow_package_managers": value.get("allow_package_managers", False),
    }


def _packages(value: dict | None, current: dict | None) -> dict:
    if value is None:
        return current or {"type": "packages", **{manager: [] for manager in PACKAGE_MANAGERS}}
    return {"type": "packages", **{manager: list(value.get(manager) or []) for manager in PACKAGE_MANAGERS}}


def environment_config_resolve(config: dict | None, current: dict | None = None) -> dict:
    """An environment config (already validated by its serializer) over the stored `current`
    one: omitted networking/packages keep theirs; the type never changes."""
    if config is None:
        return current or {"type": "cloud", "networking": _networking(None, None), "packages": _packages(None, None)}
    if current is not None and current.get("type") != config["type"]:
        raise InvalidRequest("config.type: an environment cannot change type.", code="invalid_config_type_change")
    if config["type"] == "self_hosted":
        return {"type": "self_hosted"}
    current = current or {}
    if config.get("packages") is not None:
        reason = package_refusal(config["packages"])  # managers the image cannot serve, bad names
        if reason:
            raise InvalidRequest(reason)
    networking = _networking(config.get("networking"), current.get("networking"))
    packages = _packages(config.get("packages"), current.get("packages"))
    has_packages = any(packages[manager] for manager in PACKAGE_MANAGERS)
    if has_packages and networking["type"] == "limited" and not networking["allow_package_managers"]:
        raise InvalidRequest("config.packages: limited networking needs allow_package_managers to install packages.")
    return {"type": "cloud", "networking": networking, "packages": packages}
