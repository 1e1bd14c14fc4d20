"""Pure rules on an agent's `multiagent` configuration (the SDK's BetaManagedAgentsMultiagent*
types): its parse, the merge of a `multiagent_20261001` update into the stored one, and what this
server refuses of it. No ORM: agents/services.py resolves the roster's agents, and
sessions/services/sessions.py copies their definitions into the session.

Served: a coordinator (or `multiagent_20261001` with subagents) spawning predefined and inline
agents as session threads, workflow runs (`workflows`: their roster is a list of its own), and the
advisor its primary thread consults."""

from core.errors import InvalidRequest

ROSTER_MAX = 20
COORDINATOR = "coordinator"
MULTIAGENT_20261001 = "multiagent_20261001"
MEMBERS = ("advisor", "subagents", "workflows")
DISABLED = {"type": "disabled"}


def _fail(field: str, message: str):
    raise InvalidRequest(f"{field}: {message}")


def _object(value, field: str, types: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        _fail(field, "must be an object.")
    if value.get("type") not in types:
        _fail(field, f"type must be one of {', '.join(repr(t) for t in types)}.")
    return value


def _entry(value, field: str, *, advisor: bool) -> dict:
    """One roster entry → {type: agent, id, version?} | {type: self} | {type: advisor, model}."""
    if isinstance(value, str):
        if not value or len(value) > 64:
            _fail(field, "an agent id is 1-64 characters.")
        return {"type": "agent", "id": value}
    types = ("agent", "self", "advisor") if advisor else ("agent", "self")
    entry = _object(value, field, types)
    if entry["type"] == "self":
        return {"type": "self"}
    if entry["type"] == "advisor":
        if not isinstance(entry.get("model"), str) or not entry["model"]:
            _fail(f"{field}.model", "required.")
        return {"type": "advisor", "model": entry["model"]}
    if not isinstance(entry.get("id"), str) or not 0 < len(entry["id"]) <= 64:
        _fail(f"{field}.id", "an agent id is 1-64 characters.")
    version = entry.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        _fail(f"{field}.version", "must be an integer of at least 1.")
    return {"type": "agent", "id": entry["id"], **({"version": version} if version is not None else {})}


def _roster(value, field: str, *, advisor: bool, required: bool) -> list[dict]:
    if value is None:
        if required:
            _fail(field, "required.")
        return []
    if not isinstance(value, list):
        _fail(field, "must be an array.")
    if required and not value:
        _fail(field, "must name at least one agent.")
    if len(value) > ROSTER_MAX:
        _fail(field, f"at most {ROSTER_MAX} agents.")
    return [_entry(item, f"{field}[{index}]", advisor=advisor) for index, item in enumerate(value)]


def _member(value, name: str) -> dict | None:
    """One member of multiagent_20261001 as sent (None when sent as null: its default)."""
    field = f"multiagent.{name}"
    if value is None:
        return None
    member = _object(value, field, ("enabled", "disabled"))
    if member["type"] == "disabled":
        return dict(DISABLED)
    if name == "advisor":
        if not isinstance(member.get("model"), str) or not member["model"]:
            _fail(f"{field}.model", "required when the advisor is enabled.")
        return {"type": "enabled", "model": member["model"]}
    parsed: dict = {"type": "enabled"}
    if "inline_agents" in member:
        inline = member["inline_agents"]
        if inline is not None:
            inline = {"type": _object(inline, f"{field}.inline_agents", ("enabled", "disabled"))["type"]}
        parsed["inline_agents"] = inline
    if "predefined_agents" in member:
        parsed["predefined_agents"] = _roster(
            member["predefined_agents"], f"{field}.predefined_agents", advisor=False, required=False
        )
    return parsed


def multiagent_parse(value) -> dict | None:
    """The `multiagent` of an agent create or update body, checked for shape (not yet merged or
    resolved). Keys a multiagent_20261001 body omits stay absent (the merge tells them apart
    from null)."""
    if value is None:
        return None
    config = _object(value, "multiagent", (COORDINATOR, MULTIAGENT_20261001))
    if config["type"] == COORDINATOR:
        agents = _roster(config.get("agents"), "multiagent.agents", advisor=True, required=True)
        return {"type": COORDINATOR, "agents": agents}
    parsed: dict = {"type": MULTIAGENT_20261001}
    for name in MEMBERS:
        if name in config:
            parsed[name] = _member(config[name], name)
    return parsed


def _default(name: str) -> dict:
    if name == "advisor":
        return dict(DISABLED)
    return {"type": "enabled", "inline_agents": {"type": "enabled"}, "predefined_agents": []}


def _member_merge(name: str, stored: dict | None, sent) -> dict:
    if sent is None:
        return _default(name)
    if stored is None or stored.get("type") != sent["type"] or sent["type"] == "disabled" or name == "advisor":
        base = _default(name) if sent["type"] == "enabled" else {}
        merged = {**base, **{key: value for key, value in sent.items() if value is not None}}
    else:
        merged = {**stored, **{key: value for key, value in sent.items() if value is not None}}
    for key in ("inline_agents", "predefined_agents"):
        if key in sent and sent[key] is None:
            merged[key] = {"type": "enabled"} if key == "inline_agents" else []
    return merged


def multiagent_merge(stored: dict | None, sent: dict | None) -> dict | None:
    """`sent` (multiagent_parse) over the agent's `stored` configuration, as the SDK's
    BetaManagedAgentsMultiagent20261001Params states it: merged level by level into a stored
    multiagent_20261001 (an omitted key keeps its value, null takes its default, an object of
    another type replaces the stored one with defaults for what it omits, a sent
    predefined_agents list replaces the stored one); a coordinator, or anything over another
    type, replaces. On create `stored` is None."""
    if sent is None or sent["type"] == COORDINATOR:
        return sent
    same = stored is not None and stored.get("type") == MULTIAGENT_20261001
    merged = {"type": MULTIAGENT_20261001}
    for name in MEMBERS:
        if name in sent:
            merged[name] = _member_merge(name, (stored or {}).get(name) if same else None, sent[name])
        elif same:
            merged[name] = stored[name]
        else:
            merged[name] = _default(name)
    return merged


def multiagent_refusal(config: dict) -> None:
    """400 naming the field for what the SDK's rules refuse of the merged configuration: a
    coordinator's roster has at most one advisor, and subagents or workflows with inline agents
    disabled need predefined agents."""
    if config["type"] == COORDINATOR:
        advisors = [index for index, entry in enumerate(config["agents"]) if entry["type"] == "advisor"]
        if len(advisors) > 1:
            _fail(f"multiagent.agents[{advisors[1]}]", "at most one advisor entry per roster.")
        return
    for name in ("subagents", "workflows"):
        member = config[name]
        inline = member.get("inline_agents") or {}
        if member["type"] == "enabled" and inline.get("type") == "disabled" and not member["predefined_agents"]:
            _fail(
                f"multiagent.{name}.predefined_agents", "must name at least one agent when inline agents are disabled."
            )


def _list_entries(config: dict, name: str) -> list[tuple[str, dict]]:
    member = config.get(name) or {}
    if member.get("type") != "enabled":
        return []
    field = f"multiagent.{name}.predefined_agents"
    return [(f"{field}[{index}]", entry) for index, entry in enumerate(member.get("predefined_agents") or [])]


def subagent_entries(config: dict | None) -> list[tuple[str, dict]]:
    """(field, entry) of every agent the configuration lets the agent spawn as a thread (not the
    advisor: advisor_model; not the workflows' roster: workflow_entries)."""
    if not config:
        return []
    if config["type"] == COORDINATOR:
        return [
            (f"multiagent.agents[{index}]", entry)
            for index, entry in enumerate(config["agents"])
            if entry["type"] != "advisor"
        ]
    return _list_entries(config, "subagents")


def workflow_entries(config: dict | None) -> list[tuple[str, dict]]:
    """(field, entry) of the predefined agents a workflow run's plan may use (a list of its own:
    an agent in one list is not added to the other)."""
    if not config or config["type"] == COORDINATOR:
        return []
    return _list_entries(config, "workflows")


def roster_entries(config: dict | None) -> list[tuple[str, dict]]:
    """(field, entry) of every agent the configuration names: the subagents', then the
    workflows' (the order roster_replace takes them in)."""
    return subagent_entries(config) + workflow_entries(config)


def roster_replace(config: dict, entries: list[dict]) -> dict:
    """`config` with its rosters (roster_entries' order) replaced by `entries`."""
    rest = iter(entries)
    if config["type"] == COORDINATOR:  # an advisor entry keeps its place
        return {**config, "agents": [entry if entry["type"] == "advisor" else next(rest) for entry in config["agents"]]}
    replaced = dict(config)
    for name, entries_of in (("subagents", subagent_entries), ("workflows", workflow_entries)):
        count = len(entries_of(config))
        if count or (config.get(name) or {}).get("type") == "enabled":
            replaced[name] = {**config[name], "predefined_agents": [next(rest) for _ in range(count)]}
    return replaced


def workflows_enabled(config: dict | None) -> dict | None:
    """The enabled `workflows` member of a multiagent_20261001 configuration, else None."""
    if not config or config["type"] == COORDINATOR:
        return None
    workflows = config.get("workflows") or {}
    return workflows if workflows.get("type") == "enabled" else None


def advisor_model(config: dict | None) -> str | None:
    """The model the primary thread may consult as its advisor (a coordinator's advisor entry, or
    multiagent_20261001's enabled advisor), else None."""
    if not config:
        return None
    if config["type"] == COORDINATOR:
        return next((entry["model"] for entry in config["agents"] if entry["type"] == "advisor"), None)
    advisor = config.get("advisor") or {}
    return advisor.get("model") if advisor.get("type") == "enabled" else None
