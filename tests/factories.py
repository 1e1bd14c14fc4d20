"""Sessions made through the services (agent, environment, session), for tests and benches that
need one without going through the HTTP API."""

import sandboxes as sandbox
from agents.services import agent_create, environment_create
from sessions.models import Session
from sessions.services.sessions import session_create

TOOLSET = [{"type": "agent_toolset_20260401"}]
CLOUD_LIMITED = {"type": "cloud", "networking": {"type": "limited"}}


def make_session(
    workspace, *, name: str = "a", tools: list | None = None, config: dict | None = None, title: str | None = None
) -> Session:
    """A new agent, environment (`config`, default self_hosted) and session in `workspace`."""
    agent, _ = agent_create(
        workspace=workspace, fields={"name": name, "model": {"id": "m"}, "tools": list(tools or [])}
    )
    environment = environment_create(
        workspace=workspace,
        name=name,
        config=config or {"type": "self_hosted"},
        description=None,
        metadata={},
        scope=None,
    )
    return session_create(
        workspace=workspace,
        agent=agent.id,
        environment_id=environment.id,
        metadata={},
        title=title,
        initial_events=[],
        resources=[],
    )


def with_sandbox(session: Session) -> Session:
    """The session with its sandbox created and started, as after its first tool call."""
    sandbox.ensure(session_id=session.id, workspace_id=session.workspace_id, networking=None)
    Session.objects.filter(pk=session.pk).update(sandbox_state=Session.SandboxState.RUNNING)
    session.refresh_from_db()
    return session
