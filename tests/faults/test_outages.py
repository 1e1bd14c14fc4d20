"""The fast parts of the fault campaign (bench/faults.py): one private stack for the module —
PostgreSQL, Redis and SeaweedFS instances of its own (bench.faults.TESTS: other ports and another
directory than the campaign's), with Mango on them as `make run` serves it (gunicorn + uvicorn
workers, a Celery worker, beat) — and one fault at a time: /readyz during each outage, an event
sent while Redis is down, a PostgreSQL kill under a live upload, an upload cut by a store kill.
Nothing here touches the shared services."""

import http.client
import json
import time

import anthropic
import psycopg
import pytest

from bench import faults

pytestmark = pytest.mark.slow

DEPENDENCIES = ("postgresql", "redis", "object_store")
NOTHING_LEFT = {"open_intents": 0, "multipart_uploads": 0, "objects_without_row": 0}
MULTIPART_INTENT = "SELECT 1 FROM files_storageintent WHERE state = 'open' AND upload_id IS NOT NULL"


@pytest.fixture(scope="module")
def stack():
    with faults.Stack(faults.TESTS) as stack:
        yield stack


@pytest.fixture(scope="module")
def key(stack):
    return stack.api_key("outages")


@pytest.fixture(scope="module")
def client(stack, key):
    return anthropic.Anthropic(base_url=stack.mango.url, api_key=key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def session_id(client):
    agent = client.beta.agents.create(name="outages", model="claude-sonnet-4-5")
    environment = client.beta.environments.create(name="outages")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id


def query(stack, sql: str, *params):
    with psycopg.connect(stack.pg.url()) as conn:
        return conn.execute(sql, params).fetchall()


def wait_for(predicate, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not within {timeout}s")


def error_of(exc: anthropic.APIStatusError) -> tuple[int, str | None, str | None]:
    body = exc.body if isinstance(exc.body, dict) else {}
    code = ((body.get("error") or {}).get("details") or {}).get("error_code")
    return exc.status_code, code, exc.response.headers.get("retry-after")


@pytest.mark.parametrize("name", DEPENDENCIES)
def test_readyz_during_each_outage(stack, name):
    """Every probe answers within MANGO_READYZ_TIMEOUT_SECONDS (2 s) plus the request, as 503
    naming what is down; ready again once it is back. After a Redis outage the worker counts as
    ready only once it has reconnected (a heartbeat written since Redis started)."""
    dependency = stack.dependency(name)
    worker_log = stack.layout.var / "worker.log"
    dependency.stop()
    try:
        for _ in range(4):
            status, body, seconds = stack.mango.readyz(timeout=5)
            assert seconds < 3.0, (name, seconds)
            assert status == 503, body
            assert name in body["error"]["message"], body
            assert body["error"]["details"]["checks"][name].startswith("down"), body
            time.sleep(0.5)
    finally:
        logged = worker_log.stat().st_size
        dependency.start()
    wait_for(lambda: stack.mango.readyz()[0] == 200, timeout=30)
    if name == "redis":
        assert b'celery.worker.consumer.connection", "message": "Connected to' in worker_log.read_bytes()[logged:]


def test_event_sent_while_redis_is_down_is_stored_once_and_its_turn_runs_after(stack, client, session_id):
    """The event commits, so the answer is its 200 (not a 500 the SDK would retry into
    duplicates); the wake-up waits in the API's outbox and the turn starts within seconds of
    Redis answering again."""
    text = f"sent while redis is down {time.time_ns()}"
    stack.redis.stop()
    try:
        started = time.monotonic()
        client.beta.sessions.events.send(
            session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
        )
        assert time.monotonic() - started < 5
        stored = query(
            stack,
            "SELECT id FROM agent_sessions_sessionevent WHERE session_id = %s AND payload::text LIKE %s",
            session_id,
            f"%{text}%",
        )
        assert len(stored) == 1
        time.sleep(1.5)  # the outbox retries meanwhile
    finally:
        stack.redis.start()
    back = time.monotonic()

    def turn_done():
        rows = query(
            stack,
            "SELECT processed_at IS NOT NULL FROM agent_sessions_sessionevent WHERE id = %s",
            stored[0][0],
        )
        idle = query(
            stack,
            "SELECT count(*) FROM agent_sessions_sessionevent WHERE session_id = %s AND type = 'session.status_idle'"
            " AND seq > (SELECT seq FROM agent_sessions_sessionevent WHERE id = %s)",
            session_id,
            stored[0][0],
        )
        return rows[0][0] and idle[0][0] >= 1

    wait_for(turn_done, timeout=20)
    assert time.monotonic() - back < 10
    assert (
        query(
            stack,
            "SELECT count(*) FROM agent_sessions_sessionevent WHERE session_id = %s AND payload::text LIKE %s",
            session_id,
            f"%{text}%",
        )[0][0]
        == 1
    )


def test_postgresql_killed_under_a_live_upload(stack, key, client):
    """A live upload spans a PostgreSQL kill (crash recovery) and a reconcile with no grace window
    right after: it completes. Requests meanwhile answer 503 database_unavailable with
    retry-after, never 500."""
    tally = faults.Tally()
    # Its body ends after the database is back (the 503 below takes up to two pool timeouts).
    slow = faults.slow_upload(stack.mango.port, key, tally, size=12 * 1024 * 1024, seconds=35)
    wait_for(lambda: query(stack, MULTIPART_INTENT), 25)
    stack.pg.kill()
    try:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.beta.files.list()
        status, code, retry_after = error_of(caught.value)
        assert (status, code) == (503, "database_unavailable")
        assert retry_after
    finally:
        stack.pg.start()
    stack.pg.wait_answers()
    result = stack.mango.manage("reconcile_files", "--grace-seconds", "0")
    assert result.returncode == 0, result.stderr
    assert "uploads_rolled_back=0" in result.stdout, result.stdout
    slow.join(60)
    assert tally.answers == {("slow_upload", 200, None): 1}, tally.answers
    (file_id,) = tally.files
    assert query(stack, "SELECT sha256 FROM files_file WHERE id = %s", file_id) == [(tally.files[file_id],)]
    wait_for(lambda: stack.leftovers() == NOTHING_LEFT, 30)


def test_store_killed_mid_upload_leaves_nothing_once_it_returns(stack, key):
    """The upload the kill cuts answers 503 object_store_unavailable with retry-after; its
    multipart upload and intent, which it could not clean up, are finished within seconds of the
    store answering again (files.reconcile_given_up), not after the hour's grace."""
    tally = faults.Tally()
    slow = faults.slow_upload(stack.mango.port, key, tally, size=16 * 1024 * 1024, seconds=8)
    wait_for(lambda: query(stack, MULTIPART_INTENT), 10)
    stack.store.kill()
    try:
        slow.join(60)
        assert [(status, code) for (_, status, code) in tally.answers] == [(503, "object_store_unavailable")]
        given_up = query(stack, "SELECT count(*) FROM files_storageintent WHERE state = 'open' AND owner = 0")[0][0]
        assert given_up == 1
    finally:
        stack.store.start()
    back = time.monotonic()
    wait_for(lambda: stack.leftovers() == NOTHING_LEFT, timeout=40, interval=0.5)
    assert time.monotonic() - back < 25  # beat runs the given-up pass every 10 s


def test_store_unavailable_answer_carries_retry_after(stack, key, client):
    # Each API process meets at most one dead pooled connection after the database kill above
    # (the first one has the pool test the others): reach both processes' pools first.
    answers = []
    for _ in range(6):
        try:
            client.beta.files.list()
            answers.append(200)
        except anthropic.APIStatusError as exc:
            answers.append(error_of(exc)[:2])
    assert answers.count((503, "database_unavailable")) <= 2, answers
    stack.store.stop()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", stack.mango.port, timeout=30)
        body = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\nxyz\r\n--b--\r\n'
        conn.request(
            "POST",
            "/v1/files",
            body=body,
            headers={
                "authorization": f"Bearer {key}",
                "anthropic-beta": "files-api-2025-04-14",
                "content-type": "multipart/form-data; boundary=b",
            },
        )
        response = conn.getresponse()
        payload = json.loads(response.read())
        assert response.status == 503, payload
        assert payload["error"]["details"]["error_code"] == "object_store_unavailable"
        assert response.getheader("retry-after")
    finally:
        stack.store.start()


def test_cap_slot_released_during_a_redis_outage_is_not_left_to_refuse(stack):
    """A request that ends while Redis is down cannot release its upload/stream slot; with the
    append-only file the slot outlives the restart, and until it expired (a minute) it counted
    against the workspace: the 429s bench/faults.py saw after Redis faults. Now the gate releases
    it before its next take."""
    import asyncio

    import redis

    from core import caps

    async def scenario():
        gate = caps.CapsGate(stack.redis.url(5))
        first = await gate.take(kind="uploads", workspace_id="w", limit=1)
        assert first is not None
        stack.redis.stop()
        try:
            await gate.release(first)  # Redis is down: not released
        finally:
            stack.redis.start()
        key = caps.cap_key("uploads", "w")
        assert redis.Redis.from_url(stack.redis.url(5)).zcard(key) == 1  # restored from the AOF
        second = await gate.take(kind="uploads", workspace_id="w", limit=1)  # not refused
        assert second is not None
        await gate.release(second)
        assert redis.Redis.from_url(stack.redis.url(5)).zcard(key) == 0
        await gate.redis.aclose()

    asyncio.run(scenario())
