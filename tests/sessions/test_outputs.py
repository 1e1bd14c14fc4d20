"""Session outputs (issue: publish /mnt/session/outputs as Files at every idle boundary).

Service-level tests drive a real Docker sandbox and the real S3 store directly; the end-to-end
tests go through the official SDK, a real Celery worker and the scripted model."""

import hashlib
import os
import subprocess
import sys

import pytest

import sandboxes as sandbox
from core.models import Workspace
from files import storage
from files.models import File, StorageIntent
from files.reconcile import reconcile
from sessions.models import Session, SessionEvent
from sessions.services.outputs import OutputsMountMissing, outputs_publish, outputs_publish_at_idle
from tests.factories import CLOUD_LIMITED, TOOLSET, make_session, with_sandbox
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.docker]

OUT = "/mnt/session/outputs"


def _new_session(workspace: Workspace, *, config: dict | None = None) -> Session:
    return make_session(workspace, name="publisher", tools=TOOLSET, config=config or CLOUD_LIMITED)


def sh(session: Session, command: str) -> str:
    result = sandbox.exec_command(session_id=session.id, command=command, timeout=60)
    assert result.exit_code == 0, result.output
    return result.output.decode()


def visible(session: Session) -> dict[str, File]:
    return {
        f.output_path: f
        for f in File.objects.filter(scope_session_id=session.id, origin=File.Origin.SESSION_OUTPUT, state="ready")
    }


def bucket_keys(workspace: Workspace) -> set[str]:
    keys = set()
    for page in (
        storage.backend()
        .client.get_paginator("list_objects_v2")
        .paginate(Bucket=storage.backend().bucket, Prefix=storage.workspace_prefix(workspace.id))
    ):
        keys.update(item["Key"] for item in page.get("Contents", []))
    return keys


def object_bytes(file: File) -> bytes:
    return storage.backend().client.get_object(Bucket=storage.backend().bucket, Key=file.object_key)["Body"].read()


def errors_of(session: Session) -> list[str]:
    return [e.payload["error"]["message"] for e in SessionEvent.objects.filter(session=session, type="session.error")]


@pytest.fixture
def session(api_key, s3_bucket, transactional_db):
    return with_sandbox(_new_session(api_key.workspace))


# --- service level: the publication itself -------------------------------------------------


def test_nested_tree_is_published_with_scope_path_mime_and_hash(session):
    sh(session, f"mkdir -p {OUT}/report/data && printf '# Title\\n' > {OUT}/report/summary.md")
    sh(session, f"printf 'a,b\\n1,2\\n' > {OUT}/report/data/table.csv && printf 'top' > {OUT}/top.txt")

    report = outputs_publish(session=session)

    files = visible(session)
    assert sorted(files) == ["report/data/table.csv", "report/summary.md", "top.txt"]
    assert report.added == sorted(files) and report.invalid == [] and report.uploads == 3
    summary = files["report/summary.md"]
    assert summary.filename == "report/summary.md"
    assert summary.scope == {"type": "session", "id": session.id}
    assert summary.downloadable is True
    assert summary.mime_type == "text/markdown"
    assert files["report/data/table.csv"].mime_type == "text/csv"
    assert object_bytes(summary) == b"# Title\n"
    assert summary.sha256 == hashlib.sha256(b"# Title\n").hexdigest()
    assert summary.size_bytes == 8


def test_unchanged_retry_keeps_the_file_and_uploads_nothing(session):
    sh(session, f"mkdir -p {OUT}/d && echo one > {OUT}/d/one.txt && echo two > {OUT}/two.txt")
    outputs_publish(session=session)
    before = {path: f.id for path, f in visible(session).items()}
    keys_before = bucket_keys(session.workspace)

    report = outputs_publish(session=session)

    assert report.uploads == 0
    assert report.unchanged == ["d/one.txt", "two.txt"]
    assert {path: f.id for path, f in visible(session).items()} == before
    assert bucket_keys(session.workspace) == keys_before


@pytest.mark.parametrize("new_content", ["a longer rewrite\n", "TWO\n"], ids=["new-size", "same-size"])
def test_rewrite_replaces_the_file_and_its_object(session, new_content):
    sh(session, f"echo two > {OUT}/two.txt")
    outputs_publish(session=session)
    old = visible(session)["two.txt"]

    sh(session, f"printf '{new_content}' > {OUT}/two.txt")
    report = outputs_publish(session=session)

    files = visible(session)
    assert list(files) == ["two.txt"]
    new = files["two.txt"]
    assert report.replaced == ["two.txt"]
    assert new.id != old.id
    assert object_bytes(new) == new_content.encode()
    assert not File.objects.filter(pk=old.pk).exists()
    assert bucket_keys(session.workspace) == {new.object_key}


def test_removed_path_is_hidden_and_its_object_deleted(session):
    sh(session, f"echo keep > {OUT}/keep.txt && echo gone > {OUT}/gone.txt")
    outputs_publish(session=session)
    gone = visible(session)["gone.txt"]

    sh(session, f"rm {OUT}/gone.txt")
    report = outputs_publish(session=session)

    assert report.removed == ["gone.txt"]
    assert list(visible(session)) == ["keep.txt"]
    assert not File.objects.filter(pk=gone.pk).exists()
    assert gone.object_key not in bucket_keys(session.workspace)
    assert not StorageIntent.objects.filter(state="open").exists()


def test_the_500_file_limit_applies_to_the_tree_across_turns(session):
    sh(session, f"cd {OUT} && i=1; while [ $i -le 499 ]; do echo $i > f$i.txt; i=$((i+1)); done")
    assert len(outputs_publish(session=session).added) == 499

    sh(session, f"echo x > {OUT}/extra1.txt && echo y > {OUT}/extra2.txt")
    outputs_publish_at_idle(session=session, interrupted=False)
    assert len(visible(session)) == 500
    (message,) = errors_of(session)
    assert "at most 500" in message and "1 entry" in message

    # Removing files frees room: the visible set follows the tree.
    sh(session, f"rm {OUT}/f1.txt {OUT}/f2.txt")
    report = outputs_publish(session=session)
    assert report.invalid == []
    files = visible(session)
    assert len(files) == 499
    assert {"extra1.txt", "extra2.txt"} <= set(files)
    assert "f1.txt" not in files


def test_invalid_entries_one_error_naming_each_and_valid_files_still_published(session, settings):
    settings.MANGO_FILE_MAX_BYTES = 1000
    sh(session, f"cd {OUT} && echo ok > ok.txt && echo target > target.txt && ln -s target.txt sym")
    sh(session, f"cd {OUT} && echo linked > first.txt && ln first.txt second.txt && mkfifo pipe")
    sh(session, f"cd {OUT} && dd if=/dev/zero of=big.bin bs=1001 count=1 2>/dev/null")
    can_mknod = sandbox.exec_command(session_id=session.id, command=f"mknod {OUT}/dev c 1 3", timeout=10)

    report = outputs_publish_at_idle(session=session, interrupted=False)

    assert sorted(visible(session)) == ["ok.txt", "target.txt"]
    (message,) = errors_of(session)
    # Under gVisor a named pipe is the sandbox kernel's own: the host's archive never lists it
    # (docs/sandboxes.md#gvisor), so it is neither published nor named.
    pipes = () if settings.MANGO_SANDBOX_RUNTIME == "runsc" else ("pipe",)
    for name in ("sym", "first.txt", "second.txt", *pipes, "big.bin"):
        assert f"{OUT}/{name}" in message, (name, message)
    if can_mknod.exit_code == 0:
        assert f"{OUT}/dev" in message
    assert len(report.invalid) == (1 if can_mknod.exit_code == 0 else 0) + 4 + len(pipes)
    event = SessionEvent.objects.get(session=session, type="session.error")
    assert event.payload["error"]["retry_status"] == {"type": "exhausted"}
    assert bucket_keys(session.workspace) == {f.object_key for f in visible(session).values()}


def test_a_later_turn_can_replace_an_invalid_entry(session):
    sh(session, f"cd {OUT} && echo t > target.txt && ln -s target.txt alias.txt")
    outputs_publish(session=session)
    assert "alias.txt" not in visible(session)

    sh(session, f"cd {OUT} && rm alias.txt && echo real > alias.txt")
    report = outputs_publish(session=session)

    assert report.invalid == []
    assert object_bytes(visible(session)["alias.txt"]) == b"real\n"


def test_interrupt_skips_publication(session):
    sh(session, f"echo x > {OUT}/x.txt")
    assert outputs_publish_at_idle(session=session, interrupted=True) is None
    assert visible(session) == {}


def test_self_hosted_and_local_process_publish_nothing(api_key, s3_bucket, transactional_db, settings):
    hosted = with_sandbox(_new_session(api_key.workspace, config={"type": "self_hosted"}))
    sh(hosted, f"echo x > {OUT}/x.txt")
    assert outputs_publish_at_idle(session=hosted, interrupted=False) is None
    assert visible(hosted) == {}

    cloud = with_sandbox(_new_session(api_key.workspace))
    sh(cloud, f"echo x > {OUT}/x.txt")
    settings.MANGO_SANDBOX = "local_process"
    assert outputs_publish_at_idle(session=cloud, interrupted=False) is None
    assert visible(cloud) == {}


def test_files_storage_not_configured_publishes_nothing(session, settings):
    sh(session, f"echo x > {OUT}/x.txt")
    settings.MANGO_FILE_S3_BUCKET = None
    assert outputs_publish_at_idle(session=session, interrupted=False) is None
    assert File.objects.filter(scope_session_id=session.id).count() == 0


def test_text_only_session_never_gets_a_container(api_key, s3_bucket, transactional_db, docker_client):
    text_only = _new_session(api_key.workspace)
    assert outputs_publish_at_idle(session=text_only, interrupted=False) is None
    assert docker_client.containers.list(all=True, filters={"label": f"mango.session={text_only.id}"}) == []


def test_legacy_sandbox_without_the_outputs_mount_fails_closed(session, docker_client):
    sh(session, f"echo published > {OUT}/kept.txt")
    outputs_publish(session=session)
    kept = visible(session)["kept.txt"]

    # Replace the sandbox with one made before the mount existed: same name and session label,
    # no outputs volume, no mount-version label.
    (old,) = docker_client.containers.list(all=True, filters={"label": f"mango.session={session.id}"})
    name, labels = old.name, {k: v for k, v in old.labels.items() if k != "mango.outputs_mount_version"}
    old.remove(force=True)
    docker_client.containers.run(
        os.environ.get("MANGO_SANDBOX_IMAGE", "mango-sandbox:latest"),
        ["sh", "-c", "sleep 3600"],
        name=name,
        labels=labels,
        detach=True,
        network_mode="none",
    )

    with pytest.raises(OutputsMountMissing):
        outputs_publish(session=session)
    outputs_publish_at_idle(session=session, interrupted=False)
    (message,) = errors_of(session)
    assert "recreate" in message.lower() or "new one" in message.lower()
    assert visible(session) == {"kept.txt": kept}


def test_worker_killed_mid_publication_then_retried(session, settings):
    """A publisher that dies after streaming some objects (kill -9) leaves only open upload
    intents; the retry converges on the tree, and reconciliation removes the orphans."""
    sh(session, f"cd {OUT} && for n in a b c d; do echo $n > $n.txt; done")
    env = {
        **os.environ,
        "DATABASE_URL": _test_database_url(),
        "MANGO_TEST_CRASH_POINT": "outputs_before_apply",
    }
    script = (
        "import django; django.setup();"
        "from sessions.models import Session;"
        "from sessions.services.outputs import outputs_publish;"
        f"outputs_publish(session=Session.objects.get(id={session.id!r}))"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=settings.BASE_DIR, capture_output=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr.decode()[-2000:]
    assert visible(session) == {}
    orphans = bucket_keys(session.workspace)
    assert len(orphans) == 4
    # Each object was preceded by its committed upload intent (reserved in a batch).
    assert StorageIntent.objects.filter(state="open", kind="upload").count() >= 4

    report = outputs_publish(session=session)
    assert sorted(report.added) == ["a.txt", "b.txt", "c.txt", "d.txt"]

    settings.MANGO_RECONCILE_GRACE_SECONDS = 0
    reconcile()
    files = visible(session)
    assert sorted(files) == ["a.txt", "b.txt", "c.txt", "d.txt"]
    assert bucket_keys(session.workspace) == {f.object_key for f in files.values()}
    assert not StorageIntent.objects.filter(state="open").exists()
    for f in files.values():
        assert hashlib.sha256(object_bytes(f)).hexdigest() == f.sha256


def _test_database_url() -> str:
    from tests.worker import test_database_url

    return test_database_url()


# --- end to end: SDK, worker, scripted model --------------------------------------------------


@pytest.fixture
def cloud_agent(sdk):
    agent = sdk.beta.agents.create(name="writer", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return agent, environment


def _turn(sdk, session_id: str, prompt: str) -> list:
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(
            session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": prompt}]}]
        )
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                return seen
    raise AssertionError([e.type for e in seen])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_outputs_are_listed_and_downloadable_as_soon_as_the_session_is_idle(sdk, model, celery_worker, cloud_agent):
    agent, environment = cloud_agent
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    model.script(
        [
            tool_use("bash", {"command": f"mkdir -p {OUT}/report && printf 'v1' > {OUT}/report/result.txt"}),
            text("Written."),
        ]
    )
    _turn(sdk, session.id, "write the report")

    # No waiting: the idle event is committed after publication.
    (published,) = list(sdk.beta.files.list(scope_id=session.id))
    assert published.filename == "report/result.txt"
    assert published.downloadable is True
    assert published.scope.id == session.id
    assert sdk.beta.files.download(published.id).read() == b"v1"

    model.script([tool_use("bash", {"command": f"printf 'version two' > {OUT}/report/result.txt"}), text("Rewritten.")])
    _turn(sdk, session.id, "rewrite it")
    (rewritten,) = list(sdk.beta.files.list(scope_id=session.id))
    assert rewritten.id != published.id
    assert sdk.beta.files.download(rewritten.id).read() == b"version two"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_invalid_entry_reports_an_error_before_idle_and_the_answer_stays(sdk, model, celery_worker, cloud_agent):
    agent, environment = cloud_agent
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    model.script(
        [
            tool_use("bash", {"command": f"echo ok > {OUT}/ok.txt && ln -s /etc/passwd {OUT}/leak"}),
            text("Here is the answer."),
        ]
    )
    seen = _turn(sdk, session.id, "go")
    types = [e.type for e in seen]
    assert types[-2:] == ["session.error", "session.status_idle"]
    assert f"{OUT}/leak" in seen[-2].error.message
    assert any(e.type == "agent.message" and e.content[0].text == "Here is the answer." for e in seen)
    assert [f.filename for f in sdk.beta.files.list(scope_id=session.id)] == ["ok.txt"]
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_interrupt_skips_publication_end_to_end(sdk, model, celery_worker, cloud_agent):
    agent, environment = cloud_agent
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    model.script([tool_use("bash", {"command": f"echo x > {OUT}/x.txt && sleep 30"}), text("never")])
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
        )
        for event in stream:
            if event.type == "agent.tool_use":
                sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
            if event.type == "session.status_idle":
                break
    assert list(sdk.beta.files.list(scope_id=session.id)) == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_text_only_session_publishes_nothing_and_creates_no_container(
    sdk, model, celery_worker, cloud_agent, docker_client
):
    agent, environment = cloud_agent
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    model.script([text("Just text.")])
    _turn(sdk, session.id, "hello")
    assert list(sdk.beta.files.list(scope_id=session.id)) == []
    assert docker_client.containers.list(all=True, filters={"label": f"mango.session={session.id}"}) == []
    wait_for(lambda: Session.objects.get(id=session.id).status == "idle")


def test_paths_with_control_or_bidi_characters_are_not_published(session):
    """CR/LF, C1 controls, U+2028 and bidirectional overrides in an output path: refused (one
    rule with uploads and resources, processors/filenames.py) and named escaped in the error."""
    sh(session, f"cd {OUT} && echo ok > ok.txt")
    sh(session, f"cd {OUT} && printf x > \"$(printf 'cr\\r\\nlf.txt')\"")
    sh(session, f"cd {OUT} && printf x > \"$(printf 'evil\\342\\200\\256txt.exe')\"")
    sh(session, f"cd {OUT} && printf x > \"$(printf 'sep\\342\\200\\250.txt')\"")
    sh(session, f"cd {OUT} && printf x > \"$(printf 'c1\\302\\205.txt')\"")

    report = outputs_publish_at_idle(session=session, interrupted=False)

    assert sorted(visible(session)) == ["ok.txt"]
    assert len(report.invalid) == 4
    (message,) = errors_of(session)
    for shown in ("cr\\u000d\\u000alf.txt", "evil\\u202etxt.exe", "sep\\u2028.txt", "c1\\u0085.txt"):
        assert f"{OUT}/{shown}" in message, (shown, message)
    for raw in ("\r", "\n", "\u202e", "\u2028", "\x85"):
        assert raw not in message
    assert bucket_keys(session.workspace) == {f.object_key for f in visible(session).values()}
