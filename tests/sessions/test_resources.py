"""File resources: session-scoped copies mounted read-only into the sandbox (api-contract §5)."""

import anthropic
import pytest

import sandboxes as sandbox
from files import storage
from files.models import File
from sessions.models import Session, SessionResource
from sessions.services.resources import resources_place
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]


@pytest.fixture
def agent_env(sdk):
    agent = sdk.beta.agents.create(
        name="mounter", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return agent, environment


def upload(sdk, name: str, data: bytes, mime: str = "text/csv"):
    return sdk.beta.files.upload(file=(name, data, mime))


def sh(session_id: str, command: str):
    return sandbox.exec_command(session_id=session_id, command=command, timeout=30)


def test_resource_copy_is_independent_downloadable_and_scoped(sdk, agent_env):
    agent, environment = agent_env
    source = upload(sdk, "data.csv", b"a,b\n1,2\n")
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=[{"type": "file", "file_id": source.id}]
    )

    (resource,) = session.resources
    assert resource.type == "file"
    assert resource.mount_path == f"/mnt/session/uploads/{source.id}"
    assert resource.file_id != source.id
    copy = sdk.beta.files.retrieve_metadata(resource.file_id)
    assert copy.downloadable is True
    assert copy.scope.id == session.id
    assert copy.filename == "data.csv"
    assert [f.id for f in sdk.beta.files.list(scope_id=session.id)] == [resource.file_id]
    assert sdk.beta.files.download(resource.file_id).read() == b"a,b\n1,2\n"
    # Top-level listing does not show the copy; the source stays not downloadable.
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.files.download(source.id)

    # Deleting the source does not affect the copy.
    sdk.beta.files.delete(source.id)
    assert sdk.beta.files.download(resource.file_id).read() == b"a,b\n1,2\n"
    assert sdk.beta.sessions.resources.retrieve(resource.id, session_id=session.id).file_id == resource.file_id


def test_add_list_retrieve_delete(sdk, agent_env):
    agent, environment = agent_env
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    first = upload(sdk, "one.txt", b"one", "text/plain")
    second = upload(sdk, "two.txt", b"two", "text/plain")

    added = sdk.beta.sessions.resources.add(session.id, type="file", file_id=first.id, mount_path="/data/one.txt")
    sdk.beta.sessions.resources.add(session.id, type="file", file_id=second.id)
    listed = list(sdk.beta.sessions.resources.list(session.id))
    assert [r.mount_path for r in listed] == ["/data/one.txt", f"/mnt/session/uploads/{second.id}"]
    assert sdk.beta.sessions.retrieve(session.id).resources[0].id == added.id

    deleted = sdk.beta.sessions.resources.delete(added.id, session_id=session.id)
    assert deleted.type == "session_resource_deleted"
    assert [r.id for r in sdk.beta.sessions.resources.list(session.id)] != [added.id]
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.resources.retrieve(added.id, session_id=session.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.files.retrieve_metadata(added.file_id)
    assert not File.objects.filter(pk=added.file_id).exists()


@pytest.mark.parametrize(
    "param,code",
    [
        ({"type": "file", "file_id": "file_01m8zzzzzzzzzzzzzzzzzzzzzz"}, "missing"),
        ({"type": "file", "file_id": "SOURCE", "mount_path": "relative/path"}, "invalid_mount_path"),
        ({"type": "file", "file_id": "SOURCE", "mount_path": "/etc/passwd"}, "invalid_mount_path"),
        ({"type": "file", "file_id": "SOURCE", "mount_path": "/mnt/session/outputs/x"}, "invalid_mount_path"),
        ({"type": "file", "file_id": "SOURCE", "mount_path": "/a/../b"}, "invalid_mount_path"),
    ],
)
def test_bad_resources_are_rejected_and_nothing_is_left(sdk, agent_env, param, code):
    agent, environment = agent_env
    source = upload(sdk, "s.txt", b"s", "text/plain")
    param = {**param, "file_id": source.id if param["file_id"] == "SOURCE" else param["file_id"]}
    files_before = File.objects.count()
    sessions_before = Session.objects.count()
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, resources=[param])
    assert raised.value.body["error"]["details"]["error_code"] == code
    assert (File.objects.count(), Session.objects.count()) == (files_before, sessions_before)


def test_cross_workspace_and_session_scoped_sources_are_rejected(sdk, agent_env, live_server, other_api_key):
    agent, environment = agent_env
    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    theirs = other.beta.files.upload(file=("t.txt", b"t", "text/plain"))
    mine = upload(sdk, "m.txt", b"m", "text/plain")
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=[{"type": "file", "file_id": mine.id}]
    )
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.resources.add(session.id, type="file", file_id=theirs.id)
    assert raised.value.body["error"]["details"]["error_code"] == "missing"
    copy_id = session.resources[0].file_id
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.resources.add(session.id, type="file", file_id=copy_id)
    assert raised.value.body["error"]["details"]["error_code"] == "session_scoped"


def test_at_most_100_resources(sdk, agent_env):
    agent, environment = agent_env
    source = upload(sdk, "s.txt", b"s", "text/plain")
    params = [{"type": "file", "file_id": source.id, "mount_path": f"/data/{n}.txt"} for n in range(101)]
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, resources=params)
    assert not File.objects.filter(scope_session_id__isnull=False).exists()


def test_added_to_a_running_sandbox_it_is_placed_before_the_next_tool_call_read_only(
    sdk, agent_env, api_key, celery_worker
):
    """The API never calls Docker: the runner places the resource before the sandbox's next tool
    call (runtime.sandbox_ready calls resources_place, as here), and a worker takes a deleted one
    out."""
    agent, environment = agent_env
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    ref = sandbox.ensure(session_id=session.id, workspace_id=api_key.workspace.id, networking=None)
    Session.objects.filter(pk=session.id).update(sandbox_state=Session.SandboxState.RUNNING, sandbox_ref=ref)
    source = upload(sdk, "big.bin", bytes(range(256)) * 20_000, "application/octet-stream")

    resource = sdk.beta.sessions.resources.add(
        session.id, type="file", file_id=source.id, mount_path="/data/in/big.bin"
    )
    assert SessionResource.objects.get(pk=resource.id).placed_ref is None
    assert resources_place(session=Session.objects.get(pk=session.id)) == 1

    assert SessionResource.objects.get(pk=resource.id).placed_ref == ref
    listing = sh(session.id, "ls -ln /data/in/big.bin && sha256sum /data/in/big.bin").output.decode()
    assert "-r--r--r--" in listing
    copy = File.objects.get(pk=resource.file_id)
    assert copy.sha256 in listing
    for attempt in ("echo x > /data/in/big.bin", "echo x >> /data/in/big.bin", "chmod 644 /data/in/big.bin"):
        assert sh(session.id, attempt).exit_code != 0, attempt
    assert copy.sha256 in sh(session.id, "sha256sum /data/in/big.bin").output.decode()

    sdk.beta.sessions.resources.delete(resource.id, session_id=session.id)
    wait_for(lambda: sh(session.id, "test -e /data/in/big.bin").exit_code != 0, 30)


@pytest.mark.slow
def test_placed_when_the_sandbox_starts_and_readable_by_the_agent(sdk, agent_env, model, celery_worker):
    agent, environment = agent_env
    source = upload(sdk, "input.txt", b"mounted content", "text/plain")
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=[{"type": "file", "file_id": source.id}]
    )
    path = f"/mnt/session/uploads/{source.id}"
    model.script(
        [tool_use("bash", {"command": f"cat {path}; echo; echo changed > {path} || echo READONLY"}), text("done")]
    )
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "read it"}]}]
    )

    def result():
        events = list(sdk.beta.sessions.events.list(session.id))
        return next((e for e in events if e.type == "agent.tool_result"), None)

    tool_result = wait_for(result, 30)
    output = tool_result.content[0].text
    assert "mounted content" in output
    assert "READONLY" in output
    assert storage.read_bounded(key=File.objects.get(pk=session.resources[0].file_id).object_key, max_bytes=100) == (
        b"mounted content"
    )


def test_orphaned_session_files_are_swept(sdk, agent_env, api_key, settings):
    """A crash between copying a resource and committing its session leaves a scoped copy with
    no session: the sweep deletes it (and never touches a live session's Files)."""
    from files.services import file_copy
    from sessions.services.sessions import session_orphan_files_delete

    agent, environment = agent_env
    source = upload(sdk, "s.txt", b"s", "text/plain")
    live = sdk.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=[{"type": "file", "file_id": source.id}]
    )
    orphan = file_copy(source=File.objects.get(pk=source.id), scope_session_id="sesn_never_committed")

    assert session_orphan_files_delete(older_than_seconds=3600) == 0
    assert session_orphan_files_delete(older_than_seconds=0) == 1

    assert not File.objects.filter(pk=orphan.id).exists()
    assert not storage.head_object(key=orphan.object_key)
    assert File.objects.filter(pk=live.resources[0].file_id, state="ready").exists()
