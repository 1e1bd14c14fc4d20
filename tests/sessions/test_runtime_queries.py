"""The runner's database work per turn stays bounded: a turn runs in this process (the worker's
code path, sessions.runtime.turn.session_run) against the scripted upstream and a local_process
sandbox, and the statements it sends to the real PostgreSQL are counted (CaptureQueriesContext).

Each model call with a bash tool use costs a fixed number of statements (the conversation read,
span.model_request_start, the answer's events with span.model_request_end and the usage totals in
one statement, the resources check, the tool result); a regression that adds a locked read or a
transaction per append shows up here as more statements per step."""

import json
import threading
import time

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.tools import AgentToolsetSerializer
from sessions.models import Session, SessionEvent
from sessions.runtime import turn
from sessions.services.announce import session_owner_remember
from sessions.services.events import LeaseLost, events_append, runner_fence
from sessions.services.user_events import session_events_send
from tests.factories import TOOLSET, make_session
from tests.scripted_model import text, tool_use, tool_uses
from tests.sessions.conftest import wait_for
from webhooks.interest import workspace_subscribed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

# The webhook outbox's endpoint lookups of each measured turn (issue 40), counted apart: none once
# the workspace is known to have no endpoint (webhooks.interest: a Redis flag per workspace, read
# by the append's gate; the warm-up turn's first event reads it from the database once).
WEBHOOK_LOOKUPS: list[int] = []
# Statements per model call that ends in one bash tool use and its result (BEGIN/COMMIT included);
# one of them reads the sandbox's provisioning counter (issue 38: it replaces two dockerd round
# trips per tool call, and a changed counter re-provisions the sandbox).
MAX_PER_TOOL_STEP = 6
# Statements of a whole turn without tool use: lease, start, one model call, idle, release; and
# the last call's usage, read at the turn's first call to decide a compaction (issue 42); and
# whether the session's sandbox sleeps (issue 38: a sleeping one is woken before a tool runs). A
# workspace with no webhook endpoint pays nothing for the outbox (issue 40: no transaction, no
# read of the session's owner, no endpoint lookup for its announced status events).
MAX_PER_TEXT_TURN = 19


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
    return _runtime_statements(queries.captured_queries), session


def _runtime_statements(captured: list[dict]) -> int:
    """The runtime's statements: the webhook outbox's lookup of the workspace's endpoints, one per
    announced status event (webhooks/receivers.py), is counted apart (WEBHOOK_LOOKUPS)."""
    webhooks = [q for q in captured if "webhooks_" in q["sql"]]
    WEBHOOK_LOOKUPS.append(len(webhooks))
    return len(captured) - len(webhooks)


def test_statements_per_tool_step_stay_bounded(api_key, local_runner):
    workspace = api_key.workspace
    WEBHOOK_LOOKUPS.clear()
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
    print(f"statements: text-only turn {text_only}, per tool step {per_step:.1f}, webhooks {WEBHOOK_LOOKUPS}")
    assert WEBHOOK_LOOKUPS[1:] == [0, 0, 0], WEBHOOK_LOOKUPS
    assert per_step <= MAX_PER_TOOL_STEP, (three_steps, one_step)
    assert text_only <= MAX_PER_TEXT_TURN, text_only


def _idle_count(session) -> int:
    return SessionEvent.objects.filter(session=session, type="session.status_idle").count()


def _answer_last_tool_use(workspace, session) -> None:
    last = SessionEvent.objects.filter(session=session, type="agent.tool_use").order_by("-seq").first()
    result = {
        "type": "user.tool_result",
        "payload": {"tool_use_id": last.id, "content": [{"type": "text", "text": "ok"}]},
    }
    session_events_send(workspace=workspace, session_id=session.id, parsed=[result])


def _run_and_close(session_id: str) -> None:
    try:
        turn.session_run(session_id=session_id)
    finally:
        connection.close()  # this thread's own


def _queued(settings) -> int:
    return redis.Redis.from_url(settings.REDIS_URL).llen(settings.MANGO_SESSIONS_QUEUE)


def test_a_self_hosted_turn_takes_its_clients_results_in_the_same_runner(api_key, local_runner, settings):
    """A turn that hands its tool uses to the client (requires_action) keeps its runner for
    MANGO_RUNNER_LINGER_SECONDS: the client's result, sent meanwhile, wakes it and continues the
    turn; the send queues no task (the runner holds the lease) and no second runner starts."""
    settings.MANGO_RUNNER_LINGER_SECONDS = 30
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    local_runner.script(
        [tool_use("bash", {"command": "echo 1"}), tool_use("bash", {"command": "echo 2"}), text("done")]
    )
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    queued = _queued(settings)  # the message's wake-up

    runner = threading.Thread(target=_run_and_close, args=(session.id,))
    runner.start()
    try:
        for answered in range(2):
            wait_for(lambda n=answered: _idle_count(session) == n + 1)
            session.refresh_from_db()
            assert session.runner_token is not None  # still held while it waits for the client
            started = time.monotonic()
            _answer_last_tool_use(workspace, session)
            assert _queued(settings) == queued  # no task for the answer
            wait_for(lambda n=answered: SessionEvent.objects.filter(
                session=session, type="session.status_running").count() == n + 2)  # fmt: skip
            assert time.monotonic() - started < 5, "the waiting runner was not woken by the answer"
        runner.join(30)
        assert not runner.is_alive()  # the turn ended (end_turn): nothing to wait for, the lease goes
    finally:
        runner.join(30)
    session.refresh_from_db()
    assert session.runner_token is None and session.status == Session.Status.IDLE
    types = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("type", flat=True))
    assert types.count("span.model_request_start") == 3 and types[-2:] == ["agent.message", "session.status_idle"]
    assert len(local_runner.requests) == 3


def test_a_runner_lets_the_session_go_when_the_client_is_slower_than_the_linger(api_key, local_runner, settings):
    """Past MANGO_RUNNER_LINGER_SECONDS the runner releases the lease; the client's later answer
    queues a task as before, and that runner continues the turn."""
    settings.MANGO_RUNNER_LINGER_SECONDS = 0.3
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    local_runner.script([tool_use("bash", {"command": "echo 1"}), text("done")])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    started = time.monotonic()
    runner = threading.Thread(target=_run_and_close, args=(session.id,))  # a worker thread, as in the threads pool
    runner.start()
    runner.join(10)
    assert not runner.is_alive() and 0.3 <= time.monotonic() - started < 10  # it waited, then let go
    session.refresh_from_db()
    assert session.runner_token is None and _idle_count(session) == 1
    queued = _queued(settings)
    _answer_last_tool_use(workspace, session)
    assert _queued(settings) == queued + 1  # no runner holds it: a task
    turn.session_run(session_id=session.id)  # in this (main) thread: a turn that ends for good never waits
    types = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("type", flat=True))
    assert types[-2:] == ["agent.message", "session.status_idle"] and len(local_runner.requests) == 2


def test_an_interrupt_ends_a_runners_wait_for_its_client(api_key, local_runner, settings):
    """A user.interrupt while the runner waits for the client's tool result: the wait ends at
    once (the watcher's flag), the interrupt is processed and the lease released."""
    settings.MANGO_RUNNER_LINGER_SECONDS = 30
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    local_runner.script([tool_use("bash", {"command": "echo 1"})])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])

    runner = threading.Thread(target=_run_and_close, args=(session.id,))
    runner.start()
    try:
        wait_for(lambda: _idle_count(session) == 1)
        started = time.monotonic()
        interrupt = {"type": "user.interrupt", "payload": {}}
        session_events_send(workspace=workspace, session_id=session.id, parsed=[interrupt])
        runner.join(10)
        assert not runner.is_alive() and time.monotonic() - started < 5
    finally:
        runner.join(30)
    session.refresh_from_db()
    assert session.runner_token is None
    assert not SessionEvent.objects.filter(session=session, processed_at__isnull=True).exists()


def test_a_runner_waiting_for_its_client_keeps_its_workspaces_turn_slot(api_key, local_runner, settings):
    """What one tenant can hold with waiting runners is bounded by its running-turns cap: the
    wait keeps a worker thread, so it keeps the workspace's slot; another session of the
    workspace waits (no thread) and is woken when the wait ends, then runs."""
    settings.MANGO_WORKSPACE_MAX_RUNNING_TURNS = 1
    settings.MANGO_RUNNER_LINGER_SECONDS = 1.5
    workspace = api_key.workspace
    waiting, other = make_session(workspace, tools=_toolset()), make_session(workspace, name="b")
    local_runner.script([tool_use("bash", {"command": "echo 1"}), text("done")])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    for session in (waiting, other):
        session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    queued = _queued(settings)
    runner = threading.Thread(target=_run_and_close, args=(waiting.id,))
    runner.start()
    try:
        wait_for(lambda: _idle_count(waiting) == 1)
        turn.session_run(session_id=other.id)  # the slot is the waiting runner's: not admitted
        assert not SessionEvent.objects.filter(session=other, type="session.status_running").exists()
        runner.join(10)
        assert not runner.is_alive()
    finally:
        runner.join(30)
    assert _queued(settings) == queued + 1  # the slot's release woke the other session
    turn.session_run(session_id=other.id)
    assert _idle_count(other) == 1


def test_a_waiting_runner_knows_what_it_handed_its_client(api_key, local_runner, settings):
    """The runner that handed two tool uses to its client (requires_action) and waits for them
    counts the answers itself: both results, sent together, start the next model call without
    reading the idle event or the session's answers back from the log, nor looking for confirmed
    tool uses (none came)."""
    settings.MANGO_RUNNER_LINGER_SECONDS = 30
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    local_runner.script([tool_uses([("bash", {"command": "echo 1"}), ("bash", {"command": "echo 2"})]), text("done")])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    statements = []

    def run():
        try:
            with CaptureQueriesContext(connection) as queries:
                turn.session_run(session_id=session.id)
            statements.extend(query["sql"] for query in queries.captured_queries)
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        wait_for(lambda: _idle_count(session) == 1)
        uses = SessionEvent.objects.filter(session=session, type="agent.tool_use").order_by("seq")
        ok = [{"type": "text", "text": "ok"}]
        results = [{"type": "user.tool_result", "payload": {"tool_use_id": use.id, "content": ok}} for use in uses]
        assert len(results) == 2
        session_events_send(workspace=workspace, session_id=session.id, parsed=results)
        runner.join(20)
        assert not runner.is_alive()
    finally:
        runner.join(30)
    types = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("type", flat=True))
    assert types[-2:] == ["agent.message", "session.status_idle"] and len(local_runner.requests) == 2
    idle = SessionEvent.objects.filter(session=session, type="session.status_idle").order_by("seq").first()
    assert idle.payload["stop_reason"]["type"] == "requires_action"
    assert not SessionEvent.objects.filter(session=session, processed_at__isnull=True).exists()
    selects = [sql for sql in statements if sql.startswith("SELECT")]
    # The turn the message started (a runner that has handed nothing out) looks for confirmed tool
    # uses once; the one the answers started reads neither them nor the idle back.
    assert sum("= 'user.tool_confirmation'" in sql for sql in selects) == 1
    assert not [sql for sql in selects if "= 'session.status_idle'" in sql]


def test_a_turn_start_is_one_statement_that_a_lost_lease_refuses_whole(api_key, no_turns):
    """session.status_running, the session running and its input marked processed are one
    statement: under another runner's fence it writes nothing (the input stays pending)."""
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    (sent,) = session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    running = {"type": "session.status_running", "payload": {}}
    with runner_fence(session_id=session.id, token="not-the-holder"), pytest.raises(LeaseLost):
        events_append(session_id=session.id, items=[running], start_turn=True, processed_ids=[sent.id])
    sent.refresh_from_db()
    session.refresh_from_db()
    assert sent.processed_at is None and session.status == Session.Status.IDLE and session.turn_started_at is None
    # As a runner does: its turn start remembered the session's owner (workspace, primary), and
    # the workspace's first announced event learnt that it has no webhook endpoint.
    session_owner_remember(session)
    assert workspace_subscribed(workspace_id=workspace.id) is False
    with CaptureQueriesContext(connection) as queries:
        events_append(session_id=session.id, items=[running], start_turn=True, processed_ids=[sent.id])
    # One statement starts the turn: no transaction and no read for the webhook outbox.
    assert len(queries.captured_queries) == 1, queries.captured_queries
    sent.refresh_from_db()
    session.refresh_from_db()
    assert sent.processed_at is not None and session.status == Session.Status.RUNNING
    assert session.turn_started_at is not None and session.last_seq == 2


def test_a_client_event_is_one_locked_read_and_one_append(api_key, no_turns):
    """POST /v1/sessions/{id}/events' database work for a message to a session no runner holds:
    the session's locked read, the append (events, sequence and bytes in one statement) and the
    self_hosted session's work item; the event waits for the runner (not processed)."""
    workspace = api_key.workspace
    session = make_session(workspace, tools=_toolset())
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=workspace, session_id=session.id, parsed=[message])  # warm: quota figure
    with CaptureQueriesContext(connection) as queries:
        (sent,) = session_events_send(workspace=workspace, session_id=session.id, parsed=[message])
    statements = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 3, statements
    sent.refresh_from_db()
    session.refresh_from_db()
    assert sent.processed_at is None and sent.seq == session.last_seq == 2
    assert session.event_bytes == sum(
        _json_bytes(e.payload) + _json_bytes(e.private) for e in SessionEvent.objects.filter(session=session)
    )


def test_the_hand_written_lookups_load_rows_as_the_orm_does(api_key):
    """core.lookups.joined_row (credentials, the session an event is appended to): JSON columns
    decoded, the named fields loaded and the rest deferred (read on access), the row lockable."""
    from django.db import transaction

    from core.lookups import joined_row
    from sessions.selectors import APPEND_FIELDS, session_get

    session = make_session(api_key.workspace, tools=_toolset())
    Session.objects.filter(pk=session.pk).update(metadata={"team": "a"})
    with transaction.atomic():
        found = session_get(workspace=api_key.workspace, session_id=session.id, for_update=True, fields=APPEND_FIELDS)
    assert found.environment_config == session.environment_config and isinstance(found.environment_config, dict)
    assert "metadata" in found.get_deferred_fields() and found.metadata == {"team": "a"}
    whole = joined_row(Session, joins=("workspace",), where="t.id = %s", params=[session.id])
    assert whole.metadata == {"team": "a"} and whole.agent_snapshot == session.agent_snapshot
    assert whole.workspace.pk == api_key.workspace.pk and not whole.get_deferred_fields()
    with pytest.raises(Exception, match="not found"):
        session_get(workspace=api_key.workspace, session_id="sesn_missing", fields=APPEND_FIELDS)


def test_a_sessions_wire_shape_reads_only_the_parts_it_has(api_key):
    """GET /v1/sessions/{id} and the create's answer: one statement says which sessions have
    resources, memory stores or outcome events; a session with none costs that one statement,
    and a part is read only for the sessions that have it."""
    from sessions.apis.sessions import sessions_wire

    bare = make_session(api_key.workspace, tools=_toolset())
    judged = make_session(api_key.workspace, tools=_toolset())
    outcome = {"outcome_id": "outc_1", "description": "all steps run"}
    events_append(session_id=judged.id, items=[{"type": "user.define_outcome", "payload": outcome, "private": {}}])
    with CaptureQueriesContext(connection) as queries:
        (alone,) = sessions_wire([bare])
    assert len(queries.captured_queries) == 1 and alone["resources"] == [] and alone["outcome_evaluations"] == []
    with CaptureQueriesContext(connection) as queries:
        first, second = sessions_wire([bare, judged])
    assert len(queries.captured_queries) == 2  # the parts, then the outcome events of `judged` only
    assert first["outcome_evaluations"] == []
    assert [(e["outcome_id"], e["result"]) for e in second["outcome_evaluations"]] == [("outc_1", "running")]


def test_tool_uses_handed_to_the_client_end_the_turn_in_the_responses_statement(api_key, local_runner):
    """A self_hosted turn whose tool use goes to the client: the model's response and the
    session.status_idle handing it over are one append (one statement: one created_at), with
    the usage totals and the turn's end."""
    session = make_session(api_key.workspace, tools=_toolset(), config={"type": "self_hosted"})
    local_runner.script([tool_use("bash", {"command": "echo hi"})])
    message = {"type": "user.message", "payload": {"content": [{"type": "text", "text": "go"}]}}
    session_events_send(workspace=api_key.workspace, session_id=session.id, parsed=[message])
    turn.session_run(session_id=session.id)
    events = list(SessionEvent.objects.filter(session=session).order_by("seq"))
    assert [e.type for e in events][-5:] == [
        "span.model_request_start",
        "span.model_request_end",
        "session.usage",
        "agent.tool_use",
        "session.status_idle",
    ]
    *_, end, usage, used, idle = events
    assert idle.payload["stop_reason"] == {"type": "requires_action", "event_ids": [used.id]}
    assert end.created_at == usage.created_at == used.created_at == idle.created_at  # one statement
    session.refresh_from_db()
    assert session.status == Session.Status.IDLE and session.turn_started_at is None
    assert session.usage["input_tokens"] == 10 and session.last_seq == idle.seq
