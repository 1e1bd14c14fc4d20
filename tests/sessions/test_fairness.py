"""Fair shares per workspace in the worker fleet and on the sandbox host.

- Turns (sessions.runtime.fairness): one workspace's burst runs at most
  MANGO_WORKSPACE_MAX_RUNNING_TURNS at a time, its other sessions wait without holding a worker
  thread and are woken by its own runners (the reaper is off here), and another workspace's turn
  starts at once instead of queueing behind the burst.
- Sandboxes (sessions.services.sandboxes): beyond MANGO_WORKSPACE_MAX_SANDBOXES live sandboxes a
  session's tool call gets an error result naming the cap, another workspace is unaffected, and
  deleting a session frees its place.

Times are the server's commit times of status_running / status_idle (processed_at), so a slow
machine stretches the turns without changing what is asserted."""

import os
import uuid

import anthropic
import pytest
import redis
from django.conf import settings as django_settings

from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for, worker_env
from tests.worker import CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

CAP = 2
BURST = 6
TURN_SECONDS = 1.5


@pytest.fixture
def fair_worker(scripted_model, settings):
    """Start a worker of this test's own (queue, caps) with `caps` in its environment."""
    queue = f"mango-fair-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.MANGO_SESSIONS_QUEUE = queue
    workers = []

    def start(**caps: int) -> CeleryWorker:
        env = {
            **worker_env(scripted_model),
            "MANGO_SANDBOX": "local_process",
            "MANGO_SESSIONS_QUEUE": queue,
            **{name: str(value) for name, value in caps.items()},
        }
        worker = CeleryWorker(env=env, queues=queue, pool="threads", concurrency=8, name="fair")
        workers.append(worker.start(timeout=120))
        return worker

    yield start
    for worker in workers:
        worker.kill()
    redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)


def _client(live_server, key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live_server.url, api_key=str(key), max_retries=0)


def _session(sdk, *, tools: tuple = ()):
    environment = sdk.beta.environments.create(name="fair")
    agent = sdk.beta.agents.create(name="fair", model="claude-sonnet-4-5", system="Be brief.", tools=list(tools))
    return sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)


def _send(sdk, session_id: str) -> None:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )


def _turn(sdk, session_id: str) -> tuple[float, float] | None:
    """(running committed, idle committed) of the session's one turn, once it has ended."""
    events = list(sdk.beta.sessions.events.list(session_id, limit=100))
    times = {e.type: e.processed_at.timestamp() for e in events if e.type.startswith("session.status_")}
    if "session.status_idle" not in times or "session.status_running" not in times:
        return None
    assert [e.type for e in events if e.type == "agent.message"] == ["agent.message"]
    return times["session.status_running"], times["session.status_idle"]


def _most_at_once(turns: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in turns] + [(end, -1) for _, end in turns])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_a_burst_runs_at_most_the_cap_at_once_and_another_workspace_does_not_wait(
    live_server, api_key, other_api_key, model, fair_worker
):
    fair_worker(MANGO_WORKSPACE_MAX_RUNNING_TURNS=CAP)
    model.script([text("done", delay=TURN_SECONDS) for _ in range(BURST + 1)])
    alpha, beta = _client(live_server, api_key), _client(live_server, other_api_key)
    burst = [_session(alpha) for _ in range(BURST)]
    other = _session(beta)

    for session in burst:
        _send(alpha, session.id)
    _send(beta, other.id)

    turns = [wait_for(lambda s=session: _turn(alpha, s.id), timeout=120, interval=0.2) for session in burst]
    other_turn = wait_for(lambda: _turn(beta, other.id), timeout=120, interval=0.2)

    # The cap holds, and is used: the worker had 8 threads, alpha ran exactly CAP turns at a time.
    assert _most_at_once(turns) == CAP
    # beta's turn started while alpha's burst was still waiting for its last rounds.
    starts = sorted(start for start, _ in turns)
    assert other_turn[0] < starts[CAP], (other_turn, starts)
    # Nobody is left waiting: every woken session ran (no reaper in this worker).
    waiting = redis.Redis.from_url(django_settings.REDIS_URL).zcard(f"mango:turns-waiting:{api_key.row.workspace_id}")
    assert waiting == 0


def _tool_results(sdk, session_id: str) -> list:
    return [e for e in sdk.beta.sessions.events.list(session_id, limit=100) if e.type == "agent.tool_result"]


def _run_bash(sdk, session_id: str, turns_before: int) -> object:
    """Send a message whose turn runs one bash command; the turn's tool result."""
    _send(sdk, session_id)

    def ended():
        events = list(sdk.beta.sessions.events.list(session_id, limit=100))
        idle = [e for e in events if e.type == "session.status_idle"]
        return events if len(idle) > turns_before else None

    wait_for(ended, timeout=60, interval=0.2)
    return _tool_results(sdk, session_id)[-1]


def _bash_session(sdk):
    return _session(sdk, tools=({"type": "agent_toolset_20260401"},))


def _bash_turn() -> list[dict]:
    return [tool_use("bash", {"command": "echo sandboxed"}), text("done")]


def test_a_workspace_at_its_sandbox_cap_gets_a_tool_error_and_deleting_a_session_frees_a_place(
    live_server, api_key, other_api_key, model, fair_worker
):
    fair_worker(MANGO_WORKSPACE_MAX_SANDBOXES=1)
    alpha, beta = _client(live_server, api_key), _client(live_server, other_api_key)
    first, second, other = _bash_session(alpha), _bash_session(alpha), _bash_session(beta)

    model.script(_bash_turn())
    assert _run_bash(alpha, first.id, 0).content[0].text.startswith("sandboxed\n")

    model.script(_bash_turn())
    refused = _run_bash(alpha, second.id, 0)
    assert refused.is_error
    assert "live sandboxes (at most 1)" in refused.content[0].text

    model.script(_bash_turn())  # another workspace is not held back by alpha's cap
    assert _run_bash(beta, other.id, 0).content[0].text.startswith("sandboxed\n")

    alpha.beta.sessions.delete(first.id)  # frees alpha's place at once
    model.script(_bash_turn())
    assert _run_bash(alpha, second.id, 1).content[0].text.startswith("sandboxed\n")
