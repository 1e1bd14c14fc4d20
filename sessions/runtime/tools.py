"""The built-in toolset (agent_toolset_20260401) and the session's MCP tools as presented to the
model, and the tool executor: built-in tools run inside the session's sandbox (sessions.sandbox),
each answered by one agent.tool_result; MCP tools are called by this worker (sessions.runtime.mcp;
on self_hosted environments too: MCP tools run server-side), each answered by one
agent.mcp_tool_result; confirmed always_ask uses run, denied ones get an error result; on
resume, the dead runner's unfinished uses get an error result."""

import fnmatch
import hmac
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from core.secrets import SecretsUnavailable
from sessions import events as ev
from sessions import sandbox
from sessions.events import SERVER_TOOL_TYPES, TOOLSET_TYPE, EventType
from sessions.models import Session, SessionEvent, SessionResource
from sessions.runtime.control import Stop, TurnControl, db_release
from sessions.runtime.mcp import McpFailure, McpTool, SessionMcp
from sessions.runtime.repositories import repositories_place
from sessions.sandbox import policy as sandbox_policy
from sessions.selectors.runner import (
    session_answered_tool_use_ids,
    session_last_idle_seq,
    session_tool_confirmations,
    session_tool_uses,
    session_unplaced_resource_types,
)
from sessions.selectors.vaults import session_environment_credentials
from sessions.services.events import SessionGone, events_append
from sessions.services.memory_mounts import session_memory_place
from sessions.services.resources import resources_place
from sessions.services.runner import session_error_record, session_sandbox_failed, session_sandbox_running
from sessions.services.sandboxes import sandbox_admit
from sessions.services.skills import session_skills_place
from sessions.services.vaults import credential_secrets

MAX_RESULT_CHARS = 100_000
DEFAULT_BASH_TIMEOUT_SECONDS = 120.0

TOOL_DEFINITIONS = {
    "bash": {
        "description": "Run a shell command (/bin/sh) in the session's sandbox. Returns the combined "
        "stdout and stderr and the exit status.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run."},
                "timeout_ms": {"type": "integer", "description": "Optional timeout in milliseconds."},
            },
            "required": ["command"],
        },
    },
    "read": {
        "description": "Read a text file in the sandbox, with line numbers.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] line"},
            },
            "required": ["file_path"],
        },
    },
    "write": {
        "description": "Create or overwrite a file in the sandbox.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["file_path", "content"],
        },
    },
    "edit": {
        "description": "Replace an exact string in a file in the sandbox (once, unless replace_all).",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
    "glob": {
        "description": "List files matching a glob pattern (** matches across directories).",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
    "grep": {
        "description": "Search file contents with an extended regular expression.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
}
# The toolset's web tools are the upstream's server tools (it searches and fetches, not us):
# offered with the agent's options when MANGO_MODEL_SERVER_WEB_TOOLS is on, not at all otherwise.
SERVER_TOOL_OPTIONS = {
    "web_search": ("allowed_domains", "blocked_domains", "user_location"),
    "web_fetch": ("allowed_domains", "blocked_domains", "max_content_tokens"),
}


@dataclass
class ToolSpec:
    name: str
    kind: str  # "builtin" | "custom" | "server" (run by the upstream) | "mcp"
    permission: ev.ToolPermission  # builtin and mcp
    mcp: McpTool | None = None


def session_tools(agent_snapshot: dict, mcp: SessionMcp | None = None) -> tuple[list[dict], dict[str, ToolSpec]]:
    """The tool list sent to the model and a name → spec map for dispatch (keyed by the name the
    model uses: MCP tools get names that collide with no other tool)."""
    definitions, specs = [], {}
    for tool in agent_snapshot.get("tools", []):
        if tool["type"] == TOOLSET_TYPE:
            for config in tool["configs"]:
                if not config["enabled"]:
                    continue
                name = config["name"]
                if name in SERVER_TOOL_TYPES:
                    if settings.MANGO_MODEL_SERVER_WEB_TOOLS:
                        options = {key: config[key] for key in SERVER_TOOL_OPTIONS[name] if config.get(key) is not None}
                        definitions.append({"type": SERVER_TOOL_TYPES[name], "name": name, **options})
                        specs[name] = ToolSpec(name, "server", ev.ToolPermission.ALWAYS_ALLOW)
                    continue
                definitions.append({"name": name, **TOOL_DEFINITIONS[name]})
                specs[name] = ToolSpec(name, "builtin", ev.ToolPermission(config["permission_policy"]["type"]))
        elif tool["type"] == "custom":
            definitions.append(
                {"name": tool["name"], "description": tool["description"], "input_schema": tool["input_schema"]}
            )
            specs[tool["name"]] = ToolSpec(tool["name"], "custom", ev.ToolPermission.ALWAYS_ALLOW)
    if mcp:
        for tool in mcp.tools(taken=set(specs)):
            definitions.append(
                {"name": tool.model_name, "description": tool.description, "input_schema": tool.input_schema}
            )
            specs[tool.model_name] = ToolSpec(tool.model_name, "mcp", ev.ToolPermission(tool.permission), mcp=tool)
    return definitions, specs


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False
    cancelled: bool = False


def _clip(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[… {len(text) - MAX_RESULT_CHARS} more characters truncated]"


def _resolve(path: str | None) -> str:
    if not path:
        return sandbox.WORKDIR
    return path if path.startswith("/") else f"{sandbox.WORKDIR}/{path}"


def run_builtin(*, session_id: str, name: str, tool_input: dict, should_cancel: Callable[[], bool]) -> ToolOutcome:
    """Execute one built-in tool call in the sandbox (which the caller has ensured exists)."""
    try:
        handler = _HANDLERS[name]
    except KeyError:
        return ToolOutcome(f"The {name} tool is unavailable on this server.", is_error=True)
    if not isinstance(tool_input, dict):
        return ToolOutcome("Tool input must be an object.", is_error=True)
    try:
        return handler(session_id, tool_input, should_cancel)
    except (KeyError, TypeError, ValueError) as exc:
        return ToolOutcome(f"Invalid input for {name}: {exc}", is_error=True)
    except FileNotFoundError as exc:
        return ToolOutcome(f"No such file: {exc}", is_error=True)
    except IsADirectoryError as exc:
        return ToolOutcome(f"Is a directory: {exc}", is_error=True)
    except PermissionError as exc:  # the sandbox user may not write there (sessions.sandbox)
        return ToolOutcome(f"Permission denied: {exc}", is_error=True)


def _bash(session_id, tool_input, should_cancel) -> ToolOutcome:
    if tool_input.get("restart"):
        return ToolOutcome("Each bash call runs in a fresh shell; nothing to restart.")
    command = tool_input["command"]
    if not isinstance(command, str):
        raise TypeError("command must be a string")
    timeout = DEFAULT_BASH_TIMEOUT_SECONDS
    if tool_input.get("timeout_ms"):
        timeout = float(tool_input["timeout_ms"]) / 1000
    timeout = min(timeout, settings.MANGO_TOOL_TIMEOUT_SECONDS)
    result = sandbox.exec_command(session_id=session_id, command=command, timeout=timeout, should_cancel=should_cancel)
    output = result.output.decode("utf-8", errors="replace")
    if result.truncated:
        output += "\n[output truncated]"
    if result.cancelled:
        return ToolOutcome(_clip(output + "\n[interrupted]"), is_error=True, cancelled=True)
    if result.timed_out:
        return ToolOutcome(_clip(output + f"\n[timed out after {timeout:g} s]"), is_error=True)
    return ToolOutcome(
        _clip(f"{output}\n[exit status: {result.exit_code}]" if output else f"[exit status: {result.exit_code}]")
    )


def _read(session_id, tool_input, should_cancel) -> ToolOutcome:
    path = _resolve(tool_input["file_path"])
    text = sandbox.read_file(session_id=session_id, path=path).decode("utf-8", errors="replace")
    lines = text.splitlines()
    first, last = 1, len(lines)
    view = tool_input.get("view_range")
    if view:
        first = max(1, int(view[0]))
        if len(view) > 1 and int(view[1]) != -1:
            last = min(last, int(view[1]))
    numbered = "\n".join(f"{number:6}\t{lines[number - 1]}" for number in range(first, last + 1))
    return ToolOutcome(_clip(numbered) if numbered else "(empty file)")


def _write(session_id, tool_input, should_cancel) -> ToolOutcome:
    path, content = _resolve(tool_input["file_path"]), tool_input["content"]
    if not isinstance(content, str):
        raise TypeError("content must be a string")
    data = content.encode()
    sandbox.write_file(session_id=session_id, path=path, data=data)
    return ToolOutcome(f"Wrote {len(data)} bytes to {path}.")


def _edit(session_id, tool_input, should_cancel) -> ToolOutcome:
    path = _resolve(tool_input["file_path"])
    old, new = tool_input["old_string"], tool_input["new_string"]
    text = sandbox.read_file(session_id=session_id, path=path).decode("utf-8")
    count = text.count(old) if old else 0
    if count == 0:
        return ToolOutcome(f"old_string was not found in {path}.", is_error=True)
    if count > 1 and not tool_input.get("replace_all"):
        return ToolOutcome(
            f"old_string occurs {count} times in {path}; make it unique or set replace_all.", is_error=True
        )
    text = text.replace(old, new) if tool_input.get("replace_all") else text.replace(old, new, 1)
    sandbox.write_file(session_id=session_id, path=path, data=text.encode())
    return ToolOutcome(f"Replaced {count if tool_input.get('replace_all') else 1} occurrence(s) in {path}.")


def _glob_regex(pattern: str) -> re.Pattern:
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z")


def _glob(session_id, tool_input, should_cancel) -> ToolOutcome:
    pattern, base = tool_input["pattern"], _resolve(tool_input.get("path"))
    result = sandbox.exec_argv(session_id=session_id, argv=["find", base, "-type", "f"])
    if result.exit_code not in (0, 1) and not result.output:
        return ToolOutcome(f"Cannot list {base}.", is_error=True)
    regex = _glob_regex(pattern.lstrip("/") if not pattern.startswith(base) else pattern[len(base) :].lstrip("/"))
    matches = []
    for line in result.output.decode("utf-8", errors="replace").splitlines():
        relative = line[len(base) :].lstrip("/") if line.startswith(base) else line
        if regex.match(relative) or fnmatch.fnmatch(relative, pattern):
            matches.append(line)
    return ToolOutcome(_clip("\n".join(sorted(matches))) if matches else "No files matched.")


def _grep(session_id, tool_input, should_cancel) -> ToolOutcome:
    pattern, base = tool_input["pattern"], _resolve(tool_input.get("path"))
    command = f"grep -rnE -- {shlex.quote(pattern)} {shlex.quote(base)}"
    result = sandbox.exec_command(session_id=session_id, command=command, timeout=60, should_cancel=should_cancel)
    text = result.output.decode("utf-8", errors="replace")
    if result.exit_code == 1:
        return ToolOutcome("No matches.")
    if result.exit_code not in (0, None):
        return ToolOutcome(text or f"grep failed with status {result.exit_code}.", is_error=True)
    return ToolOutcome(_clip(text))


_HANDLERS = {
    "bash": _bash,
    "read": _read,
    "write": _write,
    "edit": _edit,
    "glob": _glob,
    "grep": _grep,
}

# Tools that need a sandbox (the web tools are the upstream's).
SANDBOX_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep"})


# --- the executor ----------------------------------------------------------------------------


def _ensure_sandbox(control: TurnControl, session: Session) -> None:
    if session.sandbox_state == Session.SandboxState.RUNNING:
        # Deleting the session raises its interrupt flag (and removes the sandbox; what a late
        # ensure makes again goes with the runner's end, turn._run_leased).
        control.check_stop()
    else:
        control.check_deleted()  # never create a sandbox for a deleted session
    sandbox_admit(session=session)  # the workspace's cap of live sandboxes
    db_release()  # no connection held while dockerd creates and starts the container
    networking = sandbox_networking(session)
    unreadable = networking.pop(UNREADABLE_CREDENTIALS, []) if networking else []
    image = None
    if session.sandbox_state != Session.SandboxState.RUNNING:
        image = _packages_image(session, networking)
    try:
        ref = sandbox.ensure(
            session_id=session.id, workspace_id=session.workspace_id, networking=networking, image=image
        )
    except sandbox.SandboxError as exc:
        session_sandbox_failed(session_id=session.id, error=f"sandbox: {exc}")
        raise
    fresh = ref != session.sandbox_ref
    if fresh:  # a new container: its skills and memory first, before it is recorded
        _credential_hosts_check(session, networking, unreadable)
        try:
            session_skills_place(session=session)
        except Exception as exc:
            raise sandbox.SandboxError(f"skills could not be placed: {exc}") from exc
        try:
            session_memory_place(session=session, ref=ref)
        except Exception as exc:
            raise sandbox.SandboxError(f"memory stores could not be placed: {exc}") from exc
    session_sandbox_running(session=session, ref=ref)
    unplaced = session_unplaced_resource_types(session_id=session.id, ref=ref)  # one statement per tool call
    if SessionResource.Type.FILE in unplaced:
        try:
            resources_place(session=session, checked=True)  # file resources not yet in this sandbox
        except Exception as exc:
            raise sandbox.SandboxError(f"file resources could not be placed: {exc}") from exc
    if SessionResource.Type.GITHUB_REPOSITORY in unplaced:
        # Cloned by the worker; a failure is a session.error and the tool call still runs.
        repositories_place(control=control, session=session, fresh=fresh)


# Where sandbox_networking lists the credentials it could not decrypt (taken out before the
# networking goes to the sandbox; a new sandbox reports each as a session.error).
UNREADABLE_CREDENTIALS = "mango_unreadable_credentials"


def sandbox_networking(session: Session) -> dict | None:
    """The environment's networking, with the hosts a `limited` sandbox's proxy lets through
    (allowed_hosts, package registries, the agent's MCP servers) resolved, and the session's
    vault environment_variable credentials the proxy substitutes (decrypted here, right before
    they go to the proxy; the sandbox gets only their placeholders)."""
    networking = session.environment_config.get("networking")
    if not networking:
        return networking
    servers = [server.get("url", "") for server in (session.agent_snapshot or {}).get("mcp_servers") or []]
    resolved = {**networking, "egress_hosts": sandbox_policy.egress_hosts(networking, servers)}
    found = session_environment_credentials(workspace_id=session.workspace_id, vault_ids=session.vault_ids or [])
    if found:
        resolved["credentials"], unreadable = [], []
        for credential in found:
            try:
                resolved["credentials"].append(_proxy_credential(session, credential))
            except SecretsUnavailable:  # MANGO_VAULT_KEY changed: the sandbox runs without this one
                unreadable.append((credential.id, credential.vault_id))
        if unreadable:
            resolved[UNREADABLE_CREDENTIALS] = unreadable
    return resolved


def _credential_hosts_check(session: Session, networking: dict | None, unreadable: list) -> None:
    """When a sandbox is made: a session.error per vault credential this server cannot decrypt
    (the sandbox has no placeholder for it), and a credential_host_unreachable_error per one whose
    hosts the environment's networking does not let the sandbox reach (the proxy would refuse
    each request there without a word to the client)."""
    items = [
        ev.item(EventType.SESSION_ERROR, ev.credential_unreadable_error(credential_id=credential_id, vault_id=vault_id))
        for credential_id, vault_id in unreadable
    ]
    for credential in (networking or {}).get("credentials") or []:
        hosts = sandbox_policy.unreachable_credential_hosts(
            credential["hosts"], networking, networking.get("egress_hosts") or []
        )
        if hosts:
            payload = ev.credential_host_unreachable_error(
                credential_id=credential["credential_id"], vault_id=credential["vault_id"], hosts=hosts
            )
            items.append(ev.item(EventType.SESSION_ERROR, payload))
    if items:
        events_append(session_id=session.id, items=items)
        db_release()


def _proxy_credential(session: Session, credential) -> dict:
    auth = credential.auth
    networking = auth["networking"]
    digest = hmac.new(settings.SECRET_KEY.encode(), f"{session.id}:{credential.id}".encode(), "sha256").hexdigest()
    return {
        "credential_id": credential.id,
        "vault_id": credential.vault_id,
        "name": auth["secret_name"],
        "placeholder": f"mango-vault-{digest[:32]}",  # not a secret: it only marks where the value goes
        "value": credential_secrets(credential)["secret_value"],
        "hosts": None if networking["type"] == "unrestricted" else list(networking["allowed_hosts"]),
        "header": auth["injection_location"]["header"],
        "body": auth["injection_location"]["body"],
    }


def _packages_image(session: Session, networking: dict | None) -> str | None:
    """The image with the environment's packages (built on the first sandbox, cached after);
    when they cannot be installed, a session.error naming the manager and the package, and the
    sandbox starts from the plain image: the session stays usable."""
    try:
        return sandbox.prepare_image(
            session_id=session.id,
            workspace_id=session.workspace_id,
            networking=networking,
            packages_config=session.environment_config.get("packages"),
        )
    except sandbox.PackageInstallFailed as exc:
        session_error_record(
            session_id=session.id,
            payload=ev.session_error(message=exc.describe()),
            last_error=f"packages: {exc.describe()}",
            rescheduling=False,
        )
        db_release()
        return None


def _answer(
    session_id: str,
    tool_use_id: str,
    text: str,
    *,
    is_error: bool,
    stop_if_deleted: bool = False,
    mcp: bool = False,
    extra: list[dict] | None = None,
) -> None:
    """Append the tool result (agent.mcp_tool_result for an MCP tool use); with stop_if_deleted,
    raise Stop instead when the session was deleted meanwhile (a condition of the append itself:
    no query of its own). `extra` events go first, in the same append."""
    if mcp:
        content = [{"type": "text", "text": text}]
        result = ev.item(
            EventType.AGENT_MCP_TOOL_RESULT,
            ev.mcp_tool_result(mcp_tool_use_id=tool_use_id, content=content, is_error=is_error),
        )
    else:
        result = ev.item(
            EventType.AGENT_TOOL_RESULT, ev.tool_result(tool_use_id=tool_use_id, text=text, is_error=is_error)
        )
    _append(session_id, [*(extra or []), result], stop_if_deleted=stop_if_deleted)


def _append(session_id: str, items: list[dict], *, stop_if_deleted: bool) -> None:
    try:
        events_append(session_id=session_id, items=items, unless_deleted=stop_if_deleted)
    except SessionGone:
        raise Stop() from None


def mcp_failure_item(failure: McpFailure) -> dict:
    """The session.error of an MCP server that could not be reached or refused the authorization
    (its message names the server and never carries a secret). `retrying`, as a repository's: the
    turn is not dead (the SDK's `exhausted`), it goes on without that server's tools, and the next
    turn connects again."""
    payload = ev.session_error(
        message=failure.message, error_type=failure.error_type, retrying=True, mcp_server_name=failure.server
    )
    return ev.item(EventType.SESSION_ERROR, payload)


def mcp_tool_run(*, control: TurnControl, session: Session, event: SessionEvent, mcp: SessionMcp) -> None:
    """Call one MCP tool (this worker is the MCP client) and append its agent.mcp_tool_result.
    A server that cannot be reached or refuses the authorization is a session.error naming it,
    and the use gets an error result: the turn goes on."""
    payload = event.payload
    control.check_stop()
    db_release()  # no connection held while the MCP server answers
    try:
        result = mcp.call(server=payload["mcp_server_name"], tool=payload["name"], arguments=payload.get("input") or {})
    except McpFailure as failure:
        _answer(
            control.session_id,
            event.id,
            failure.message,
            is_error=True,
            stop_if_deleted=True,
            mcp=True,
            extra=[mcp_failure_item(failure)],
        )
        return
    item = ev.item(
        EventType.AGENT_MCP_TOOL_RESULT,
        ev.mcp_tool_result(mcp_tool_use_id=event.id, content=result.content, is_error=result.is_error),
    )
    _append(control.session_id, [item], stop_if_deleted=True)


def tool_run(*, control: TurnControl, session: Session, event: SessionEvent, mcp: SessionMcp | None = None) -> None:
    """Execute one built-in (or MCP) tool use and append its result. Raises Stop when the session was
    deleted meanwhile (nothing more is logged) or the command was interrupted."""
    if event.type == EventType.AGENT_MCP_TOOL_USE:
        if mcp is None:
            _answer(control.session_id, event.id, "MCP is unavailable in this turn.", is_error=True, mcp=True)
            return
        return mcp_tool_run(control=control, session=session, event=event, mcp=mcp)
    name = event.payload["name"]
    try:
        if name in SANDBOX_TOOLS:
            _ensure_sandbox(control, session)
        db_release()  # no connection held while the command runs
        outcome = run_builtin(
            session_id=session.id,
            name=name,
            tool_input=event.payload.get("input") or {},
            should_cancel=control.should_stop,
        )
    except sandbox.SandboxError as exc:
        outcome = ToolOutcome(f"The sandbox is unavailable: {exc}", is_error=True)
    # Deleted meanwhile (its sandbox went with it): Stop, nothing more is logged.
    _answer(control.session_id, event.id, outcome.text, is_error=outcome.is_error, stop_if_deleted=True)
    if outcome.cancelled:
        raise Stop()


def tools_run_confirmed(*, control: TurnControl, session: Session, mcp: SessionMcp | None = None) -> None:
    """Answer always_ask tool uses the client confirmed (run them) or denied (error result). On
    self_hosted a confirmed built-in tool is the client's to run (its user.tool_result answers
    it): never run in a sandbox of ours; a confirmed MCP tool is ours to call everywhere."""
    confirmations = session_tool_confirmations(session_id=session.id)
    if not confirmations:
        return
    answered = session_answered_tool_use_ids(session_id=session.id)
    self_hosted = session.environment_config.get("type") == "self_hosted"
    for tool_use in session_tool_uses(session_id=session.id, ids=list(confirmations)):
        if tool_use.id in answered:
            continue
        confirmation = confirmations[tool_use.id]
        is_mcp = tool_use.type == EventType.AGENT_MCP_TOOL_USE
        if confirmation["result"] == "allow":
            if is_mcp or not self_hosted:
                tool_run(control=control, session=session, event=tool_use, mcp=mcp)
        else:
            message = confirmation.get("deny_message") or "The user denied this tool call."
            _answer(session.id, tool_use.id, message, is_error=True, mcp=is_mcp)


def tools_answer_dangling(*, session_id: str) -> None:
    """On resume, built-in tool uses of the interrupted turn (after the last idle) that the
    dead worker was executing, and that never got a result, are answered with an error."""
    answered = session_answered_tool_use_ids(session_id=session_id)
    confirmed = session_answered_tool_use_ids(session_id=session_id, types=(EventType.USER_TOOL_CONFIRMATION,))
    for tool_use in session_tool_uses(session_id=session_id, after_seq=session_last_idle_seq(session_id=session_id)):
        if tool_use.id in answered or tool_use.id in confirmed:
            continue
        if tool_use.payload.get("evaluated_permission") != "allow":
            continue
        mcp = tool_use.type == EventType.AGENT_MCP_TOOL_USE
        text = "The worker running this tool stopped before it finished."
        _answer(session_id, tool_use.id, text, is_error=True, mcp=mcp)
