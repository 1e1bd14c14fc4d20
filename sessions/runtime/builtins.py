"""The built-in toolset's six tools (bash, read, write, edit, glob, grep), each run in the
session's sandbox (sandboxes, which the caller has made ready: runtime.sandbox_ready) and
answered with a ToolOutcome; the executor (runtime.tools) turns it into an agent.tool_result."""

import fnmatch
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

import sandboxes as sandbox

MAX_RESULT_CHARS = 100_000
DEFAULT_BASH_TIMEOUT_SECONDS = 120.0


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
    except PermissionError as exc:  # the sandbox user may not write there (sandboxes)
        return ToolOutcome(f"Permission denied: {exc}", is_error=True)


def _bash(session_id, tool_input, should_cancel) -> ToolOutcome:
    command = tool_input.get("command")
    if tool_input.get("restart") and not command:  # every call here starts a fresh shell
        return ToolOutcome("bash session restarted")
    if not command:
        return ToolOutcome("bash: command is required (or restart: true).", is_error=True)
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
