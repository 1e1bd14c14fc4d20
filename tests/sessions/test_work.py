"""The self-hosted work queue through the official SDK (strict response validation): the 8
`environments.work` methods, environment keys and work tokens kept apart from API keys, leases
(the heartbeat's compare-and-set and its 412, a lost lease reclaimed), the items a session's
life queues and stops, and the key's command and admin."""

import base64
import json
import re
import threading
import time

import anthropic
import pytest
from anthropic.lib.environments._poller import sessions_token_from_secret
from anthropic.types.beta.environments import BetaHeartbeatPreconditionFailedError
from django.core.management import call_command
from django.db import connection

from core.errors import InvalidRequest
from sessions.models import EnvironmentKey, WorkItem
from sessions.queue.credentials import credential_hash
from sessions.queue.services import environment_key_create


def _sessions_token(secret: str | None) -> str | None:
    """The SDK's own decoding of a work item's secret (a SecretStr since 2.17)."""
    token = sessions_token_from_secret(secret)
    return token.get_secret_value() if token is not None else None


pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-5"


def _bearer(live_server, raw: str) -> anthropic.Anthropic:
    """A strictly validating client whose only credential is `raw` as a Bearer token (as the
    SDK's worker builds its scoped clients)."""
    client = anthropic.Anthropic(
        base_url=live_server.url, auth_token=raw, max_retries=0, _strict_response_validation=True
    )
    client.api_key = None
    return client


@pytest.fixture
def hosted(sdk, live_server, no_turns):
    """A self_hosted environment, its key, a client on that key and an agent."""
    environment = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    _, raw = environment_key_create(environment_id=environment.id, name="ci")
    agent = sdk.beta.agents.create(name="a", model=MODEL)
    return type(
        "Hosted", (), {"environment": environment, "key": raw, "worker": _bearer(live_server, raw), "agent": agent}
    )


def _session(sdk, hosted) -> str:
    return sdk.beta.sessions.create(agent=hosted.agent.id, environment_id=hosted.environment.id).id


def test_the_eight_work_methods_conform(sdk, live_server, hosted):
    env_id = hosted.environment.id
    session_id = _session(sdk, hosted)
    stats = sdk.beta.environments.work.stats(env_id)
    assert (stats.type, stats.depth, stats.pending) == ("work_queue_stats", 1, 0)
    assert stats.oldest_queued_at is not None

    listed = list(hosted.worker.beta.environments.work.list(env_id))
    assert [(w.state, w.data.id, w.data.type, w.secret) for w in listed] == [("queued", session_id, "session", None)]

    work = hosted.worker.beta.environments.work.poll(env_id, block_ms=1, anthropic_worker_id="worker-a")
    assert (work.id, work.state, work.environment_id, work.data.id) == (listed[0].id, "queued", env_id, session_id)
    token = _sessions_token(work.secret)  # the SDK's own decoding
    assert token and token.startswith("mango-worktoken-")
    stats = sdk.beta.environments.work.stats(env_id)
    assert (stats.depth, stats.pending, stats.workers_polling) == (0, 1, 1)
    assert hosted.worker.beta.environments.work.poll(env_id) is None  # handed out: not again within 5 s

    acked = hosted.worker.beta.environments.work.ack(work.id, environment_id=env_id)
    assert acked.state == "starting" and acked.acknowledged_at is not None and acked.secret is None
    # The retry of an ack whose answer was lost gets the same answer (a 4xx makes the SDK's
    # poller force-stop the item).
    repeated = hosted.worker.beta.environments.work.ack(work.id, environment_id=env_id)
    assert (repeated.state, repeated.acknowledged_at) == ("starting", acked.acknowledged_at)
    item = _bearer(live_server, token)
    beat = item.beta.environments.work.heartbeat(work.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert (beat.type, beat.state, beat.lease_extended, beat.ttl_seconds) == ("work_heartbeat", "active", True, 60)
    with pytest.raises(anthropic.ConflictError):  # once it runs, an ack is no retry: a 409
        hosted.worker.beta.environments.work.ack(work.id, environment_id=env_id)
    with pytest.raises(BetaHeartbeatPreconditionFailedError) as refused:
        item.beta.environments.work.heartbeat(work.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert refused.value.status_code == 412 and refused.value.error_code == "heartbeat_precondition_failed"
    held = refused.value.body["error"]["details"]["current_state"]
    assert held == {
        "last_heartbeat": beat.last_heartbeat,
        "lease_extended": False,
        "state": "active",
        "ttl_seconds": 60,
    }
    again = item.beta.environments.work.heartbeat(
        work.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat, desired_ttl_seconds=20
    )
    assert again.lease_extended and again.ttl_seconds == 20 and again.last_heartbeat > beat.last_heartbeat

    retrieved = sdk.beta.environments.work.retrieve(work.id, environment_id=env_id)
    assert retrieved.state == "active" and retrieved.secret is None and retrieved.started_at is not None
    assert retrieved.latest_heartbeat_at == again.last_heartbeat
    sdk.beta.environments.work.update(work.id, environment_id=env_id, metadata={"a": "1", "b": "2"})
    updated = sdk.beta.environments.work.update(work.id, environment_id=env_id, metadata={"a": None, "c": "3"})
    assert updated.metadata == {"b": "2", "c": "3"}

    stopping = sdk.beta.environments.work.stop(work.id, environment_id=env_id)
    assert stopping.state == "stopping" and stopping.stop_requested_at is not None
    told = item.beta.environments.work.heartbeat(work.id, environment_id=env_id, expected_last_heartbeat="stale")
    assert (told.state, told.lease_extended) == ("stopping", False)  # not compared once stopping
    stopped = item.beta.environments.work.stop(work.id, environment_id=env_id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at is not None
    with pytest.raises(anthropic.ConflictError):
        hosted.worker.beta.environments.work.stop(work.id, environment_id=env_id, force=True)
    with pytest.raises(anthropic.AuthenticationError):  # a stopped item's token authorizes nothing
        item.beta.sessions.retrieve(session_id)


def test_environment_keys_work_tokens_and_api_keys_are_kept_apart(sdk, live_server, hosted, api_key, other_api_key):
    env_id = hosted.environment.id
    session_id = _session(sdk, hosted)
    other_session = _session(sdk, hosted)
    work = hosted.worker.beta.environments.work.poll(env_id)
    token = _sessions_token(work.secret)
    item = _bearer(live_server, token)
    api = hosted.worker

    # The environment key: its environment's worker routes only.
    for refused in (
        lambda: api.beta.sessions.list(),
        lambda: api.beta.sessions.retrieve(session_id),
        lambda: api.beta.environments.retrieve(env_id),
        lambda: api.beta.files.list(),
        lambda: api.beta.environments.work.retrieve(work.id, environment_id=env_id),
        lambda: api.beta.environments.work.update(work.id, environment_id=env_id, metadata={"a": "1"}),
        lambda: api.beta.environments.work.stats(env_id),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            refused()
    # An API key: not where the SDK takes the environment key.
    with pytest.raises(anthropic.AuthenticationError):
        sdk.beta.environments.work.poll(env_id)
    with pytest.raises(anthropic.AuthenticationError):
        list(sdk.beta.environments.work.list(env_id))
    # The work token: its own session's calls and its own item, nothing else.
    assert item.beta.sessions.retrieve(session_id).id == session_id
    assert item.beta.sessions.events.list(session_id).data == []
    assert [t.session_id for t in item.beta.sessions.threads.list(session_id)] == [session_id]
    for refused in (
        lambda: item.beta.sessions.retrieve(other_session),
        lambda: item.beta.sessions.events.list(other_session),
        lambda: item.beta.sessions.delete(session_id),
        lambda: item.beta.sessions.update(session_id, title="mine now"),
        lambda: item.beta.sessions.list(),
        lambda: item.beta.environments.work.poll(env_id),
        lambda: list(item.beta.environments.work.list(env_id)),
        lambda: item.beta.environments.work.retrieve(work.id, environment_id=env_id),
        lambda: item.beta.files.list(),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            refused()
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(anthropic.AuthenticationError):
        _bearer(live_server, forged).beta.sessions.retrieve(session_id)
    # Another environment's key cannot reach this one; a revoked key reaches nothing.
    other_env = sdk.beta.environments.create(name="theirs", config={"type": "self_hosted"})
    _, other_key = environment_key_create(environment_id=other_env.id)
    with pytest.raises(anthropic.AuthenticationError):
        _bearer(live_server, other_key).beta.environments.work.poll(env_id)
    EnvironmentKey.objects.filter(environment_id=env_id).update(revoked_at="2026-01-01T00:00:00Z")
    with pytest.raises(anthropic.AuthenticationError):
        api.beta.environments.work.poll(env_id)
    # Another workspace's API key: the same not-found as a missing environment.
    foreign = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    for refused in (
        lambda: foreign.beta.environments.work.retrieve(work.id, environment_id=env_id),
        lambda: foreign.beta.environments.work.stats(env_id),
        lambda: foreign.beta.environments.work.stop(work.id, environment_id=env_id),
        lambda: foreign.beta.environments.work.update(work.id, environment_id=env_id, metadata={"a": "1"}),
    ):
        with pytest.raises(anthropic.NotFoundError):
            refused()
    # A cloud environment has no workers.
    with pytest.raises(InvalidRequest):
        environment_key_create(environment_id=sdk.beta.environments.create(name="cloud").id)


def test_a_lost_lease_is_reclaimed_and_the_old_holder_gets_a_412(sdk, live_server, hosted):
    env_id = hosted.environment.id
    _session(sdk, hosted)
    first = hosted.worker.beta.environments.work.poll(env_id, anthropic_worker_id="one")
    hosted.worker.beta.environments.work.ack(first.id, environment_id=env_id)
    old = _bearer(live_server, _sessions_token(first.secret))
    beat = old.beta.environments.work.heartbeat(
        first.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=1
    )
    assert hosted.worker.beta.environments.work.poll(env_id) is None  # the lease holds
    time.sleep(1.3)
    second = hosted.worker.beta.environments.work.poll(env_id, anthropic_worker_id="two")
    assert second.id == first.id and second.state == "queued" and second.latest_heartbeat_at is None
    hosted.worker.beta.environments.work.ack(second.id, environment_id=env_id)
    with pytest.raises(BetaHeartbeatPreconditionFailedError):  # the old holder learns it lost the lease
        old.beta.environments.work.heartbeat(
            first.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat
        )
    new = _bearer(live_server, _sessions_token(second.secret))
    assert new.beta.environments.work.heartbeat(
        second.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
    ).lease_extended
    assert WorkItem.objects.get(id=first.id).claims == 2


def test_a_reclaimed_item_gets_a_new_token_and_the_old_one_stops_working(sdk, live_server, hosted):
    """Issue 44, finding 10: a worker that lost its claim (its poll was not acknowledged in time,
    or its lease ran out) keeps no access to the session."""
    env_id = hosted.environment.id
    session_id = _session(sdk, hosted)
    work = hosted.worker.beta.environments.work
    first = work.poll(env_id)
    old_token = _sessions_token(first.secret)
    old = _bearer(live_server, old_token)
    assert old.beta.sessions.retrieve(session_id).id == session_id
    time.sleep(0.05)
    second = work.poll(env_id, reclaim_older_than_ms=10)
    new_token = _sessions_token(second.secret)
    assert second.id == first.id and new_token != old_token
    for refused in (
        lambda: old.beta.sessions.retrieve(session_id),
        lambda: old.beta.sessions.events.list(session_id),
        lambda: old.beta.sessions.events.send(
            session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "still mine"}]}]
        ),
        lambda: old.beta.environments.work.ack(first.id, environment_id=env_id),
        lambda: old.beta.environments.work.stop(first.id, environment_id=env_id),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            refused()
    # Its heartbeat learns what the SDK's worker needs to let the item go: the lease is lost.
    with pytest.raises(BetaHeartbeatPreconditionFailedError):
        old.beta.environments.work.heartbeat(first.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    new = _bearer(live_server, new_token)
    assert new.beta.sessions.retrieve(session_id).id == session_id
    work.ack(second.id, environment_id=env_id)
    assert new.beta.environments.work.heartbeat(
        second.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
    ).lease_extended
    assert WorkItem.objects.get(id=first.id).state == "active"


def test_an_unacknowledged_item_is_handed_out_again_after_the_reclaim_window(sdk, hosted):
    env_id = hosted.environment.id
    _session(sdk, hosted)
    work = hosted.worker.beta.environments.work
    polled = work.poll(env_id)
    assert work.poll(env_id) is None
    sdk.beta.environments.work.update(polled.id, environment_id=env_id, metadata={"a": "1"})  # an API key's
    time.sleep(0.05)
    again = work.poll(env_id, reclaim_older_than_ms=10)
    assert again.id == polled.id and again.metadata == {"a": "1"}  # the claim's row, loaded as the ORM would
    assert WorkItem.objects.get(id=polled.id).claims == 2


def test_sessions_queue_and_stop_their_items(sdk, hosted):
    env_id = hosted.environment.id
    work = hosted.worker.beta.environments.work
    session_id = _session(sdk, hosted)
    # Input while its item is open queues nothing more.
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    assert WorkItem.objects.filter(session_id=session_id).count() == 1
    polled = work.poll(env_id)
    work.ack(polled.id, environment_id=env_id)
    work.stop(polled.id, environment_id=env_id, force=True)
    # A dormant session (no open item) given input needs a worker again.
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "again"}]}]
    )
    again = work.poll(env_id)
    assert again.id != polled.id and again.data.id == session_id
    # Deleting the session stops its item.
    sdk.beta.sessions.delete(session_id)
    assert sdk.beta.environments.work.retrieve(again.id, environment_id=env_id).state == "stopped"
    # A cloud session never queues one.
    cloud = sdk.beta.environments.create(name="cloud")
    sdk.beta.sessions.create(agent=hosted.agent.id, environment_id=cloud.id)
    assert WorkItem.objects.filter(environment_id=cloud.id).count() == 0


def test_a_poll_waits_for_work_and_wakes_when_it_is_queued(sdk, hosted):
    env_id = hosted.environment.id
    work = hosted.worker.beta.environments.work
    started = time.monotonic()
    assert work.poll(env_id, block_ms=600) is None
    assert 0.55 < time.monotonic() - started < 5
    found = {}

    def poll():
        found["work"] = work.poll(env_id, block_ms=999)
        found["at"] = time.monotonic()

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.3)
    queued_at = time.monotonic()
    session_id = _session(sdk, hosted)
    poller.join(5)
    assert found["work"].data.id == session_id
    assert found["at"] - queued_at < 0.9  # woken, not timed out
    with pytest.raises(anthropic.BadRequestError):
        work.poll(env_id, block_ms=1000)


def test_create_environment_key_prints_the_key_last_and_stores_only_its_hash(capsys, sdk, live_server, no_turns):
    environment = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    call_command("create_environment_key", "--environment", environment.id, "--name", "fleet")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    assert raw.startswith("mango-envkey-")
    key = EnvironmentKey.objects.get(environment_id=environment.id)
    assert key.key_hash == credential_hash(raw) and raw not in key.key_hint
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(k)::text FROM agent_sessions_environmentkey k")
        assert raw not in " ".join(row[0] for row in cursor.fetchall())
    assert _bearer(live_server, raw).beta.environments.work.poll(environment.id) is None


def test_the_admin_creates_a_key_once_and_revokes_it(admin_client, sdk, live_server, no_turns):
    environment = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    page = admin_client.post("/admin/agent_sessions/environmentkey/add/", {"environment": environment.id, "name": "x"})
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    raw = re.search(r'<pre id="raw-key" class="mango-raw-key">([^<]+)</pre>', page.content.decode()).group(1)
    worker = _bearer(live_server, raw)
    assert worker.beta.environments.work.poll(environment.id) is None
    key = EnvironmentKey.objects.get(environment_id=environment.id)
    assert raw not in admin_client.get(f"/admin/agent_sessions/environmentkey/{key.pk}/change/").content.decode()
    admin_client.post(
        "/admin/agent_sessions/environmentkey/",
        {"action": "revoke_keys", "_selected_action": [key.pk]},
    )
    with pytest.raises(anthropic.AuthenticationError):
        worker.beta.environments.work.poll(environment.id)


def test_a_work_secret_is_the_sdks_payload():
    from sessions.queue.credentials import work_secret

    secret = work_secret(work_id="work_x", session_id="sesn_y", claim=1)
    assert "=" not in secret
    payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    assert list(payload) == ["sessions_token"] and payload["sessions_token"].startswith("mango-worktoken-work_x.")


def test_a_workers_requests_count_in_its_tenants_share(sdk, hosted, api_key):
    """core.shares places each request in its workspace's share of the API threads: a worker's
    (environment key, work token) in its tenant's, not in one anonymous share all tenants' workers
    would contend for."""
    import asyncio

    from core.shares import ANONYMOUS, shares

    _session(sdk, hosted)
    work = hosted.worker.beta.environments.work.poll(hosted.environment.id)
    token = _sessions_token(work.secret)

    async def workspace_of(raw):
        return await shares().workspace_of({"HTTP_AUTHORIZATION": f"Bearer {raw}"})

    assert asyncio.run(workspace_of(hosted.key)) == api_key.workspace.id
    assert asyncio.run(workspace_of(token)) == api_key.workspace.id
    assert asyncio.run(workspace_of("mango-envkey-forged")) == ANONYMOUS


def test_a_work_token_reaches_its_sessions_skills_and_memory_stores_only(sdk, live_server, hosted, s3_bucket, tmp_path):
    """The SDK's worker downloads the session agent's skills (download_session_skills) and syncs
    its memory stores with the item's token: those, and no other skill or store."""
    import asyncio

    from anthropic.lib import files_from_dir
    from anthropic.lib.tools._skills import download_session_skills

    from tests.sessions.test_skills import make_skill

    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path / "mine")))
    other_skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path / "theirs", name="other-tools")))
    store = sdk.beta.memory_stores.create(name="prefs")
    other_store = sdk.beta.memory_stores.create(name="other")
    agent = sdk.beta.agents.create(name="skilled", model=MODEL, skills=[{"type": "custom", "skill_id": skill.id}])
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=hosted.environment.id,
        resources=[{"type": "memory_store", "memory_store_id": store.id}],
    )
    work = hosted.worker.beta.environments.work.poll(hosted.environment.id)
    token = _sessions_token(work.secret)
    item = _bearer(live_server, token)

    async def download():
        client = anthropic.AsyncAnthropic(base_url=live_server.url, auth_token=token, max_retries=0)
        retrieved = await client.beta.sessions.retrieve(session.id)
        return await download_session_skills(client, workdir=tmp_path / "work", session=retrieved)

    assert [path.name for path in asyncio.run(download())] == ["pdf-tools"]
    created = item.beta.memory_stores.memories.create(memory_store_id=store.id, path="/a.md", content="x")
    assert [m.id for m in item.beta.memory_stores.memories.list(memory_store_id=store.id)] == [created.id]
    (version,) = list(sdk.beta.memory_stores.memory_versions.list(memory_store_id=store.id))
    assert version.created_by.type == "session_actor" and version.created_by.session_id == session.id
    for refused in (
        lambda: item.beta.skills.retrieve(other_skill.id),
        lambda: item.beta.skills.list(),
        lambda: item.beta.memory_stores.memories.list(memory_store_id=other_store.id),
        lambda: item.beta.memory_stores.archive(store.id),
        lambda: item.beta.memory_stores.delete(store.id),
        lambda: item.beta.memory_stores.list(),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            refused()


def test_a_work_token_writes_no_memory_store_attached_read_only(sdk, live_server, hosted):
    """Issue 44, finding 1: the token's scope carries each attachment's access. A read_only store
    is read through it and never written; a read_write one is written."""
    kept = sdk.beta.memory_stores.create(name="kept")
    keep = sdk.beta.memory_stores.memories.create(memory_store_id=kept.id, path="/keep.md", content="keep me")
    notes = sdk.beta.memory_stores.create(name="notes")
    session = sdk.beta.sessions.create(
        agent=hosted.agent.id,
        environment_id=hosted.environment.id,
        resources=[
            {"type": "memory_store", "memory_store_id": kept.id, "access": "read_only"},
            {"type": "memory_store", "memory_store_id": notes.id, "access": "read_write"},
        ],
    )
    work = hosted.worker.beta.environments.work.poll(hosted.environment.id)
    assert work.data.id == session.id
    item = _bearer(live_server, _sessions_token(work.secret))
    memories = item.beta.memory_stores.memories
    assert [m.path for m in memories.list(memory_store_id=kept.id)] == ["/keep.md"]
    assert memories.retrieve(keep.id, memory_store_id=kept.id).content == "keep me"
    for refused in (
        lambda: memories.create(memory_store_id=kept.id, path="/new.md", content="x"),
        lambda: memories.update(keep.id, memory_store_id=kept.id, content="overwritten"),
        lambda: memories.delete(keep.id, memory_store_id=kept.id),
        lambda: item.beta.memory_stores.memory_versions.list(memory_store_id=kept.id),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            refused()
    stored = sdk.beta.memory_stores.memories.list(memory_store_id=kept.id, view="full")
    assert [(m.path, m.content) for m in stored] == [("/keep.md", "keep me")]
    assert memories.create(memory_store_id=notes.id, path="/n.md", content="written").path == "/n.md"


def test_a_work_token_names_only_the_files_its_session_can_see(sdk, live_server, hosted, s3_bucket):
    """Issue 44, finding 2: admission on a work token's behalf sees only what the session sees
    (its resources, the Files scoped to it); any other File of the workspace is as missing as a
    foreign one, so its text never reaches the model."""
    from tests.sessions.test_file_admission import doc, message, upload

    secret = upload(sdk, "secret.md", b"the workspace's secret")
    attached = upload(sdk, "attached.md", b"the session's own notes")
    session = sdk.beta.sessions.create(
        agent=hosted.agent.id,
        environment_id=hosted.environment.id,
        resources=[{"type": "file", "file_id": attached.id, "mount_path": "/mnt/notes.md"}],
    )
    work = hosted.worker.beta.environments.work.poll(hosted.environment.id)
    item = _bearer(live_server, _sessions_token(work.secret))
    with pytest.raises(anthropic.BadRequestError) as refused:
        item.beta.sessions.events.send(session.id, events=[message(doc(secret.id))])
    assert secret.id in refused.value.message and "the workspace's secret" not in str(refused.value.body)
    assert list(sdk.beta.sessions.events.list(session.id)) == []
    assert item.beta.sessions.events.send(session.id, events=[message(doc(attached.id))]).data
    # An API key sees the whole workspace, as before.
    assert sdk.beta.sessions.events.send(session.id, events=[message(doc(secret.id))]).data
