"""The runner's database work per turn stays bounded: a turn runs in this process (the worker's
code path, sessions.runtime.turn.session_run) against the scripted upstream and a local_process
sandbox, and the statements it sends to the real PostgreSQL are counted (CaptureQueriesContext).

Each model call with a bash tool use costs a fixed number of statements (the conversation read,
span.model_request_start, the answer's events with span.model_request_end and the usage totals in
one statement, the resources check, the tool result); a regression that adds a locked read or a
transaction per append shows up here as more statements per step."""

import json

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.models import Session, SessionEvent
from sessions.runtime import turn
from sessions.serializers.tools import AgentToolsetSerializer
from sessions.services.events import session_events_send
from tests.factories import TOOLSET, make_session
from tests.scripted_model import text, tool_use

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

# Statements per model call that ends in one bash tool use and its result (BEGIN/COMMIT included).
MAX_PER_TOOL_STEP = 5
# Statements of a whole turn without tool use: lease, start, one model call, idle, release.
MAX_PER_TEXT_TURN = 20


@pytest.fixture
def local_runner(settings, model, tmp_path):
    # The turns run here: their wake-up tasks go to a queue no worker of the run consumes.
    queue = f"{settings.MANGO_SESSIONS_QUEUE}-in-process"
    settings.MANGO_SESSIONS_QUEUE = queue
    settings.ANTHROPIC_BASE_URL = model.url
    settings.ANTHROPIC_API_KEY = "sk-test-scripted"
    settings.MANGO_SANDBOX = "local_process"
    settings.MANGO_SANDBOX_LOCAL_ROOT = tmp_path
    settings.MANGO_WORKSPACE_MAX_RUNNING_TURNS = 0
    yield model
    redis.Redis.from_url(settings.REDIS_URL).delete(queue)


def _json_bytes(value: dict) -> int:
    return len(json.dumps(value).encode()) if value else 2


def _toolset() -> list[dict]:
    serializer = AgentToolsetSerializer(data=TOOLSET[0])
    serializer.is_valid(raise_exception=True)
    return [serializer.validated_data]


def _turn_statements(workspace, model, tool_calls: int) -> tuple[int, Session]:
    session = make_session(workspace, tools=_toolset(), config={"type": "cloud"})
    model.script([tool_use("bash", {"command": f"echo step {n}"}) for n in range(tool_calls)] + [text("done")])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    with CaptureQueriesContext(connection) as queries:
        turn.session_run(session_id=session.id)
    return len(queries.captured_queries), session


def test_statements_per_tool_step_stay_bounded(api_key, local_runner):
    workspace = api_key.workspace
    _turn_statements(workspace, local_runner, 1)  # warm: first sandbox, first connection
    text_only, _ = _turn_statements(workspace, local_runner, 0)
    one_step, _ = _turn_statements(workspace, local_runner, 1)  # and its sandbox's creation
    three_steps, session = _turn_statements(workspace, local_runner, 3)

    types = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("type", flat=True))
    step = [
        "span.model_request_start",
        "span.model_request_end",
        "session.usage",
        "agent.tool_use",
        "agent.tool_result",
    ]
    assert types == [
        "user.message",
        "session.status_running",
        *step * 3,
        "span.model_request_start",
        "span.model_request_end",
        "session.usage",
        "agent.message",
        "session.status_idle",
    ]
    results = SessionEvent.objects.filter(session=session, type="agent.tool_result").order_by("seq")
    assert [r.payload["content"][0]["text"] for r in results] == [f"step {n}\n\n[exit status: 0]" for n in range(3)]
    session.refresh_from_db()
    assert session.usage["input_tokens"] == 4 * 10 and session.status == Session.Status.IDLE
    assert session.last_seq == len(types) and session.runner_token is None
    assert session.turn_started_at is None and session.active_seconds > 0
    # The one-statement appends count their bytes against the workspace's event quota as the
    # locked ones do (an empty object counts its two braces).
    stored = SessionEvent.objects.filter(session=session)
    assert session.event_bytes == sum(_json_bytes(e.payload) + _json_bytes(e.private) for e in stored)

    per_step = (three_steps - one_step) / 2
    print(f"statements: text-only turn {text_only}, per tool step {per_step:.1f}")
    assert per_step <= MAX_PER_TOOL_STEP, (three_steps, one_step)
    assert text_only <= MAX_PER_TEXT_TURN, text_only
