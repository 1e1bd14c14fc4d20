"""The coordinator's workflow tool: start_workflow_run, offered to a multiagent session's primary
thread when its agent's `multiagent.workflows` is enabled, and its execution
(sessions.services.workflows). The plan is JSON (sessions.workflow_plan): phases in order, each
phase's tasks run as threads side by side."""

from sessions.inline_agents import inline_schema
from sessions.models import Session
from sessions.services.workflows import workflow_run_start

START = "start_workflow_run"

_TASK = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "A workflow agent's name."},
        "inline_agent": {},  # inline_schema's, for the coordinator
        "message": {"type": "string", "description": "The task."},
    },
    "required": ["message"],
}


def workflow_tool_definition(agents: list[dict], inline: bool, coordinator: dict) -> dict:
    listing = "\n".join(f"- {agent['name']}: {agent.get('description') or 'no description'}" for agent in agents)
    agents_text = f"\nAgents:\n{listing}" if agents else ""
    inline_text = " A task may define an inline agent." if inline else ""
    description = "An agent you define for this task instead (not saved): your model and built-in tools, and those of"
    description += " your MCP servers and custom tools you name."
    task = {**_TASK, "properties": {**_TASK["properties"], "inline_agent": inline_schema(coordinator, description)}}
    if not inline:
        task["properties"].pop("inline_agent")
    return {
        "name": START,
        "description": "Start a workflow run: its phases run in order, each phase's tasks as threads side by side in"
        " the session's sandbox (a shared /workspace); a phase ends once each of its threads reported, and the next"
        " phase's threads read the earlier reports. The run's result (every report) arrives as a message when it"
        f" ends, and your turn continues until then.{inline_text}{agents_text}",
        "input_schema": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "timeout_seconds": {"type": "number", "description": "The run's time limit (at most the server's)."},
                "phases": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "description": {"type": "string"},
                            "tasks": {"type": "array", "items": task},
                        },
                        "required": ["name", "tasks"],
                    },
                },
            },
            "required": ["phases"],
        },
    }


def workflow_tool_run(*, session: Session, tool_use_id: str, tool_input: dict, workflows: dict) -> tuple[str, bool]:
    """Run start_workflow_run for the primary thread `session` (`workflows`: Roster.workflows)."""
    return workflow_run_start(
        primary=session,
        tool_use_id=tool_use_id,
        plan=tool_input,
        agents=workflows["agents"],
        inline=workflows["inline"],
        coordinator=workflows["coordinator"],
    )
