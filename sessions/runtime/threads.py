"""The coordinator's thread tools: what a multiagent session's primary thread is offered to
spawn a thread of one of its roster's agents, to message a thread, and to consult its advisor,
and their execution (sessions.services.threads). Only the primary thread spawns (the roster's
agents have no multiagent of their own: depth 1); every thread's reply comes back to it as a
message. The advisor is a thread too (agent {type: advisor, model}, named anthropic.advisor,
one per session): a tool-less agent on the advisor model that reads the question and the
primary's transcript and answers."""

from dataclasses import dataclass, field

from agents.multiagent import advisor_model, subagent_entries, workflows_enabled
from sessions.events import thread_id_of, thread_session_id
from sessions.inline_agents import InlineRefused, inline_definition, inline_schema, inline_template
from sessions.models import Session
from sessions.runtime.workflows import START, workflow_tool_definition, workflow_tool_run
from sessions.selectors.runner import session_transcript
from sessions.services.threads import ADVISOR_NAME, ThreadRefused, advisor_consult, thread_message_send, thread_spawn

SPAWN = "spawn_agent"
MESSAGE = "message_agent"
CONSULT = "consult_advisor"
THREAD_TOOLS = (SPAWN, MESSAGE, CONSULT, START)
# What of the primary's conversation the advisor reads with a question (its newest part).
ADVISOR_TRANSCRIPT_CHARS = 20_000


@dataclass
class Roster:
    """What a coordinator may spawn: its predefined agents' full definitions, and whether it may
    define inline agents (then `inline` is their template: the coordinator's model, its built-in
    toolset, the session's execution identity). Falsy when it may spawn nothing."""

    agents: list[dict] = field(default_factory=list)
    inline: dict | None = None
    coordinator: dict = field(default_factory=dict)  # the coordinator's definition (inline agents draw on it)
    advisor: str | None = None  # the advisor's model, when the primary may consult one
    # When it may start workflow runs: {agents: their definitions, inline: the template or None}.
    workflows: dict | None = None

    def __bool__(self) -> bool:
        return bool(self.agents) or self.inline is not None or self.advisor is not None or self.workflows is not None

    @property
    def spawns(self) -> bool:
        return bool(self.agents) or self.inline is not None


def thread_roster(session: Session) -> Roster:
    """What a session's primary thread may spawn; nothing for a child thread or a single-agent
    session."""
    config = session.agent_snapshot.get("multiagent") if session.primary_id is None else None
    if not config:
        return Roster()
    agents = [entry for _field, entry in subagent_entries(config)]
    advisor = advisor_model(config)
    snapshot = session.agent_snapshot
    template = inline_template(snapshot)
    workflows = workflows_enabled(config)
    if workflows is not None:
        inline_runs = (workflows.get("inline_agents") or {}).get("type") == "enabled"
        workflows = {
            "agents": workflows.get("predefined_agents") or [],
            "inline": template if inline_runs else None,
            "coordinator": snapshot,
        }
    subagents = config.get("subagents") or {}
    if subagents.get("type") != "enabled" or (subagents.get("inline_agents") or {}).get("type") != "enabled":
        return Roster(agents=agents, advisor=advisor, workflows=workflows, coordinator=snapshot)
    return Roster(agents=agents, inline=template, advisor=advisor, workflows=workflows, coordinator=snapshot)


def thread_tool_definitions(roster: Roster) -> list[dict]:
    """The thread tools as the model sees them: spawn and message when it may spawn, consult
    when it has an advisor."""
    consult = [_consult_definition(roster.advisor)] if roster.advisor else []
    if roster.workflows is not None:
        workflows = roster.workflows
        consult.append(
            workflow_tool_definition(workflows["agents"], workflows["inline"] is not None, roster.coordinator)
        )
    if not roster.spawns:
        return consult
    listing = "\n".join(f"- {agent['name']}: {agent.get('description') or 'no description'}" for agent in roster.agents)
    properties: dict = {"message": {"type": "string", "description": "The task for the agent."}}
    required = ["message"]
    if roster.agents:
        properties["agent"] = {"type": "string", "enum": sorted({agent["name"] for agent in roster.agents})}
    if roster.inline is not None:
        properties["inline_agent"] = inline_schema(
            roster.coordinator,
            "An agent you define for this thread instead of a listed one (it is not saved): your model and built-in"
            " tools, with this name and system prompt, and those of your MCP servers and custom tools you name.",
        )
    else:
        required.append("agent")
    agents = f"\nAgents:\n{listing}" if roster.agents else ""
    return [
        {
            "name": SPAWN,
            "description": "Start a new thread running an agent, with its own context, in the session's "
            "sandbox (a shared /workspace), and send it a first message. Threads run concurrently; each one's "
            "reply arrives as a message from its thread when it finishes its turn, and your turn continues "
            f"until every thread has replied.{agents}",
            "input_schema": {"type": "object", "properties": properties, "required": required},
        },
        {
            "name": MESSAGE,
            "description": "Send a follow-up message to a thread started earlier (it keeps its context).",
            "input_schema": {
                "type": "object",
                "properties": {
                    "session_thread_id": {"type": "string"},
                    "message": {"type": "string"},
                },
                "required": ["session_thread_id", "message"],
            },
        },
        *consult,
    ]


def _consult_definition(model: str) -> dict:
    return {
        "name": CONSULT,
        "description": f"Ask your advisor (the model {model}) for advice mid-task: it reads your question and the "
        "conversation so far, and its answer arrives as a message from its thread (your turn continues until "
        "it has answered). It has no tools and changes nothing.",
        "input_schema": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "What you want advice on."}},
            "required": ["question"],
        },
    }


def thread_tool_run(*, session: Session, name: str, tool_input: dict, tool_use_id: str = "") -> tuple[str, bool]:
    """Run one thread tool for the primary thread `session`: (result text, is_error)."""
    if name == CONSULT:
        return _consult(session, tool_input)
    if name == START:
        workflows = thread_roster(session).workflows
        if workflows is None:
            return "This agent cannot start workflow runs.", True
        return workflow_tool_run(session=session, tool_use_id=tool_use_id, tool_input=tool_input, workflows=workflows)
    message = tool_input.get("message")
    if not isinstance(message, str) or not message.strip():
        return "message: a non-empty string is required.", True
    content = [{"type": "text", "text": message}]
    try:
        if name == SPAWN:
            definition, refusal = _spawned(thread_roster(session), tool_input)
            if refusal:
                return refusal, True
            child = thread_spawn(primary=session, definition=definition, content=content)
            return (
                f"Started thread {thread_id_of(child.id)} running agent {definition['name']!r}."
                " Its reply will arrive as a message from that thread.",
                False,
            )
        thread_id = tool_input.get("session_thread_id")
        if not isinstance(thread_id, str) or not thread_id.startswith("sthr_"):
            return "session_thread_id: a thread id (sthr_…) is required.", True
        target = thread_message_send(sender=session, target_id=thread_session_id(thread_id), content=content)
        return f"Sent to thread {thread_id_of(target.id)}.", False
    except ThreadRefused as refused:
        return str(refused), True


def _spawned(roster: Roster, tool_input: dict) -> tuple[dict | None, str | None]:
    """The definition a spawn names (a roster agent by name or id, or an inline one), or why not."""
    inline = tool_input.get("inline_agent")
    if inline is not None:
        if roster.inline is None:
            return None, "inline_agent: this agent cannot define inline agents."
        try:
            return inline_definition(
                inline, template=roster.inline, coordinator=roster.coordinator, field="inline_agent"
            ), None
        except InlineRefused as refused:
            return None, str(refused)
    wanted = tool_input.get("agent")
    definition = next((a for a in roster.agents if a["name"] == wanted), None) or next(
        (a for a in roster.agents if a["id"] == wanted), None
    )
    if definition is None:
        names = ", ".join(repr(a["name"]) for a in roster.agents) or "none"
        return None, f"agent: no agent {wanted!r} in the roster ({names})."
    return definition, None


def _consult(session: Session, tool_input: dict) -> tuple[str, bool]:
    model = thread_roster(session).advisor
    question = tool_input.get("question")
    if model is None:
        return "This agent has no advisor.", True
    if not isinstance(question, str) or not question.strip():
        return "question: a non-empty string is required.", True
    transcript = session_transcript(session_id=session.id, max_chars=ADVISOR_TRANSCRIPT_CHARS)
    text = f"Question: {question}\n\nThe conversation so far:\n{transcript or '(nothing yet)'}"
    try:
        thread = advisor_consult(primary=session, model=model, content=[{"type": "text", "text": text}])
    except ThreadRefused as refused:
        return str(refused), True
    return (
        f"Asked the advisor (thread {thread_id_of(thread.id)}, {ADVISOR_NAME}). Its advice will arrive as a"
        " message from that thread.",
        False,
    )
