"""A workflow run's plan, and the payloads of its workflow_run.* events (the SDK's
BetaManagedAgentsWorkflowRun* types). Pure: no ORM.

The SDK calls a run's plan "a program that the agent writes" without saying its language; here it
is JSON given to the coordinator's start_workflow_run tool: phases run in order, each phase's
tasks as threads side by side, a phase ended once each of its threads reported (the text of its
turn's messages). A phase's threads read the reports of the phases before it."""

from core.ids import new_id
from sessions.inline_agents import InlineRefused, inline_definition

PHASES_MAX = 20
TASKS_MAX = 10
NAME_MAX = 255
TEXT_MAX = 20_000
# The SDK's error kinds (workflow_run.error's `error.type`).
MAX_WORKFLOW_RUNS = "max_workflow_runs_error"
THREAD_LIMIT = "thread_limit_error"
TIMEOUT = "timeout_error"
PROGRAM = "program_error"
UNKNOWN = "unknown_error"


class PlanRefused(Exception):
    """The plan is not one this server runs (the message says why: a program_error)."""


def _text(value, field: str, *, required: bool, limit: int = NAME_MAX) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise PlanRefused(f"{field}: a non-empty string of at most {limit} characters is required.")
    return value


def _task(value, field: str, *, agents: list[dict], inline: dict | None, coordinator: dict) -> dict:
    if not isinstance(value, dict):
        raise PlanRefused(f"{field}: must be an object.")
    message = _text(value.get("message"), f"{field}.message", required=True, limit=TEXT_MAX)
    if value.get("inline_agent") is not None:
        if inline is None:
            raise PlanRefused(f"{field}.inline_agent: this agent's workflows cannot define inline agents.")
        try:
            agent = inline_definition(
                value["inline_agent"], template=inline, coordinator=coordinator, field=f"{field}.inline_agent"
            )
        except InlineRefused as refused:
            raise PlanRefused(str(refused)) from None
        return {"agent": agent, "message": message}
    wanted = value.get("agent")
    definition = next((a for a in agents if a["name"] == wanted), None) or next(
        (a for a in agents if a["id"] == wanted), None
    )
    if definition is None:
        names = ", ".join(repr(a["name"]) for a in agents) or "none"
        raise PlanRefused(f"{field}.agent: no agent {str(wanted)[:64]!r} among the workflows' agents ({names}).")
    return {"agent": definition, "message": message}


def plan_parse(value, *, agents: list[dict], inline: dict | None, coordinator: dict) -> dict:
    """The plan a start_workflow_run call gives (its tool input), checked and resolved:
    {name, description, timeout_seconds, phases: [{id, name, description, tasks}]}. Raises
    PlanRefused."""
    if not isinstance(value, dict):
        raise PlanRefused("The plan must be an object.")
    phases = value.get("phases")
    if not isinstance(phases, list) or len(phases) > PHASES_MAX:
        raise PlanRefused(f"phases: an array of at most {PHASES_MAX} phases is required.")
    timeout = value.get("timeout_seconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise PlanRefused("timeout_seconds: a positive number is required.")
    parsed = []
    for index, phase in enumerate(phases):
        field = f"phases[{index}]"
        if not isinstance(phase, dict):
            raise PlanRefused(f"{field}: must be an object.")
        tasks = phase.get("tasks")
        if not isinstance(tasks, list) or not 0 < len(tasks) <= TASKS_MAX:
            raise PlanRefused(f"{field}.tasks: an array of 1 to {TASKS_MAX} tasks is required.")
        parsed.append(
            {
                "id": new_id("wfph"),
                "name": _text(phase.get("name"), f"{field}.name", required=True),
                "description": _text(phase.get("description"), f"{field}.description", required=False),
                "tasks": [
                    _task(task, f"{field}.tasks[{number}]", agents=agents, inline=inline, coordinator=coordinator)
                    for number, task in enumerate(tasks)
                ],
            }
        )
    return {
        "name": _text(value.get("name"), "name", required=False) or "workflow",
        "description": _text(value.get("description"), "description", required=False, limit=TEXT_MAX),
        "timeout_seconds": timeout,
        "phases": parsed,
    }


def created_payload(run) -> dict:
    phases = [{"id": p["id"], "name": p["name"], "description": p["description"]} for p in run.phases]
    return {"workflow_run_id": run.id, "name": run.name, "description": run.description, "phases": phases}


def error_payload(kind: str, message: str, run_id: str | None) -> dict:
    return {"workflow_run_id": run_id, "error": {"type": kind, "message": message}}


def task_message(*, run, phase: dict, task: dict, earlier: list[tuple[str, str, str]]) -> str:
    """A task thread's first message: its task, and the reports of the run's earlier phases
    ((phase name, agent name, report))."""
    text = f"[Workflow run {run.name!r}, phase {phase['name']!r}]\n{task['message']}"
    if earlier:
        listed = "\n\n".join(f"- {agent} (phase {name!r}):\n{report}" for name, agent, report in earlier)
        text += f"\n\nReports of the earlier phases:\n{listed}"
    return text


def result_message(*, run, result: dict, reports: list[tuple[str, str, str]]) -> str:
    """What the coordinator reads when its run ended: how, and every thread's report."""
    if result["type"] == "completed":
        how = "completed"
    else:
        how = f"ended with an error ({result['error']['type']}: {result['error']['message']})"
    text = f"Workflow run {run.id} ({run.name!r}) {how}."
    if reports:
        listed = "\n\n".join(f"- {agent} (phase {name!r}):\n{report}" for name, agent, report in reports)
        text += f"\n\nReports:\n{listed}"
    return text
