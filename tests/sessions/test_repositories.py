"""Repository resources (issue #22 item 4) against a git smart-HTTP server on loopback with token
auth (tests/git_server.py: dulwich behind Basic auth): the API's shapes through the official SDK
with strict validation, the outbound guard at create and at clone time, the worker's git adapter
(pinned address, no redirects, bounded), and real Docker sandboxes fed by a real Celery worker:
branch, default and commit checkouts, the token absent from the sandbox (environment,
.git/config, tree), from responses, events, the worker's log and a dump of the database, each
repository_* session.error before the tool call (which still runs), rotation, a repository added
to a running sandbox, and the per-workspace bound on what clones make a worker hold."""

import logging
import os
import secrets
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import anthropic
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from core.caps import thread_gate
from core.secrets import generate_key
from integrations import git
from sessions.models import SessionResource
from sessions.runtime.repositories import clone_max_bytes, clone_slot
from tests.git_server import GitServer
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for, worker_env
from tests.worker import CeleryWorker

MODEL = "claude-sonnet-4-5"
PORT = 8810
GOOD = f"tok-good-{secrets.token_hex(12)}"
WRONG = f"tok-wrong-{secrets.token_hex(12)}"
NOACCESS = f"tok-noaccess-{secrets.token_hex(12)}"
KEY = generate_key()
ALLOWED = f"127.0.0.1:{PORT}"
BIG_BYTES = 3 * 1024 * 1024
WORKER_MAX_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def git_host(tmp_path_factory):
    server = GitServer(tmp_path_factory.mktemp("git"), port=PORT, tokens={GOOD}, denied={NOACCESS})
    shas = server.add_repository(
        "app",
        commits={
            "main": [
                {"README.md": b"hello\n"},
                {"README.md": b"hello again\n", "run.sh": b"#!/bin/sh\necho hi\n", "src/lib/deep.txt": b"deep\n"},
            ],
            "feature": [{"feature.txt": b"feature\n"}],
        },
    )
    server.add_repository("big", commits={"main": [{"blob.bin": os.urandom(BIG_BYTES)}]})
    server.shas = shas
    server.start()
    yield server
    server.stop()


@pytest.fixture
def guard(settings):
    """This process (the API) may reach the loopback git server, and can store secrets."""
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED]
    settings.MANGO_VAULT_KEY = [KEY]
    return settings


@pytest.fixture(scope="module")
def repo_worker(django_db_setup, django_db_blocker, scripted_model, tmp_path_factory):
    """A worker of this module's own queue that shares the vault key, may reach the git server
    at 127.0.0.1 (not `localhost`), clones at most WORKER_MAX_BYTES, into a scratch directory
    the tests look into."""
    queue = f"mango-repo-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    scratch = tmp_path_factory.mktemp("scratch")
    env = {
        **worker_env(scripted_model),
        "MANGO_SESSIONS_QUEUE": queue,
        "MANGO_VAULT_KEY": KEY,
        "MANGO_OUTBOUND_PRIVATE_HOSTS": ALLOWED,
        "MANGO_REPOSITORY_MAX_BYTES": str(WORKER_MAX_BYTES),
        "MANGO_REPOSITORY_SCRATCH_DIR": str(scratch),
        # The real image: git itself works on the placed trees (tests/sessions/test_sandbox_image.py).
        "MANGO_SANDBOX_IMAGE": "mango-sandbox:bookworm",
    }
    with django_db_blocker.unblock():
        worker = CeleryWorker(env=env, queues=queue, name="repo").start(timeout=60)
    worker.scratch = scratch
    worker.queue = queue
    yield worker
    worker.stop()
    redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)


@pytest.fixture
def worker(repo_worker, guard):
    guard.MANGO_SESSIONS_QUEUE = repo_worker.queue
    return repo_worker


def _agent_env(sdk):
    agent = sdk.beta.agents.create(
        name="coder", model=MODEL, system="Be brief.", tools=[{"type": "agent_toolset_20260401"}]
    )
    env = sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})
    return agent, env


def _events(sdk, session_id: str) -> list:
    return list(sdk.beta.sessions.events.list(session_id, limit=1000))


def _turn(sdk, model, session_id: str, command: str) -> str:
    """One user turn that runs `command` with bash and ends; the tool's output."""
    model.script([tool_use("bash", {"command": command}), text("Done.")])
    before = len([e for e in _events(sdk, session_id) if e.type == "agent.tool_result"])
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )

    def idle_after_turn():
        events = _events(sdk, session_id)
        results = [e for e in events if e.type == "agent.tool_result"]
        return len(results) > before and events[-1].type == "session.status_idle"

    wait_for(idle_after_turn, timeout=90)
    results = [e for e in _events(sdk, session_id) if e.type == "agent.tool_result"]
    assert not results[-1].is_error, results[-1]
    output = "".join(block.text for block in results[-1].content)
    assert output.rstrip().endswith("[exit status: 0]"), output
    return output.rstrip().removesuffix("[exit status: 0]")


def _exec(docker_client, session_id: str, command: str) -> str:
    container = docker_client.containers.get(f"mango-sbx-{session_id}")
    return container.exec_run(["/bin/sh", "-c", command], user="root").output.decode()


def _add_repository(sdk, session_id: str, body: dict):
    """resources.add of a github_repository: the SDK's typed `add` takes files only, so this is
    its raw post, with the beta header and the response parsed (strictly) as the SDK's union."""
    return sdk.post(
        f"/v1/sessions/{session_id}/resources",
        body=body,
        cast_to=anthropic.types.beta.sessions.ResourceRetrieveResponse,
        options={"headers": {"anthropic-beta": "managed-agents-2026-04-01"}},
    )


def _scratch_entries(worker) -> list[str]:
    return sorted(os.listdir(worker.scratch))


# --- the API: shapes, validation, the guard at create ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sdk_shapes_of_repository_resources_and_rotation(sdk, live_server, api_key, guard, git_host, no_turns, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx2")  # at WARNING by default (core/logging.py)
    agent, env = _agent_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "github_repository", "url": git_host.url("app"), "authorization_token": GOOD},
            {
                "type": "github_repository",
                "url": git_host.url("app"),
                "checkout": {"type": "branch", "name": "feature"},
                "mount_path": "/home/agent/feature",
            },
            {
                "type": "github_repository",
                "url": git_host.url("app"),
                "authorization_token": GOOD,
                "checkout": {"type": "commit", "sha": git_host.shas["main"][0]},
                "mount_path": "/workspace/old",
            },
        ],
    )
    default, branch, commit = session.resources
    assert type(default).__name__ == "BetaManagedAgentsGitHubRepositoryResource"
    assert (default.type, default.url, default.mount_path, default.checkout) == (
        "github_repository",
        git_host.url("app"),
        "/workspace/app",
        None,
    )
    assert branch.checkout.type == "branch" and branch.checkout.name == "feature"
    assert branch.mount_path == "/home/agent/feature"
    assert commit.checkout.type == "commit" and commit.checkout.sha == git_host.shas["main"][0]

    resources = sdk.beta.sessions.resources
    listed = resources.list(session.id)
    assert [r.id for r in listed.data] == [default.id, branch.id, commit.id]
    assert resources.retrieve(default.id, session_id=session.id).url == git_host.url("app")

    # Stored encrypted, never returned.
    row = SessionResource.objects.get(id=default.id)
    assert row.authorization_token and GOOD not in row.authorization_token
    assert SessionResource.objects.get(id=branch.id).authorization_token == ""

    rotated = resources.update(default.id, session_id=session.id, authorization_token=WRONG)
    assert type(rotated).__name__ == "BetaManagedAgentsGitHubRepositoryResource"
    assert rotated.id == default.id and rotated.updated_at >= default.updated_at
    row.refresh_from_db()
    assert row.authorization_token and WRONG not in row.authorization_token

    # resources.add takes a repository too (the SDK types only files there: a raw post).
    added = _add_repository(
        sdk, session.id, {"type": "github_repository", "url": git_host.url("big"), "authorization_token": GOOD}
    )
    assert added.type == "github_repository" and added.mount_path == "/workspace/big"
    wire = str(sdk.with_raw_response.beta.sessions.resources.list(session.id).http_response.text)
    wire += str(sdk.with_raw_response.beta.sessions.retrieve(session.id).http_response.text)
    assert GOOD not in wire and WRONG not in wire and "authorization_token" not in wire

    # A file resource still cannot be updated; an unknown one is a 404.
    file = sdk.beta.files.upload(file=("a.txt", b"a", "text/plain"))
    file_resource = resources.add(session.id, type="file", file_id=file.id)
    with pytest.raises(anthropic.BadRequestError, match="Only github_repository"):
        resources.update(file_resource.id, session_id=session.id, authorization_token=GOOD)
    with pytest.raises(anthropic.NotFoundError):
        resources.update("sesrsc_nope", session_id=session.id, authorization_token=GOOD)
    assert len(resources.list(session.id).data) == 5
    # Nothing the server logged carries a token (the refused update above was logged); the client's own
    # debug log of what it sent (the SDK, httpx) is not the server's.
    client = ("anthropic", "httpx", "httpcore", "httpx2", "httpcore2")
    served = [record.getMessage() for record in caplog.records if not record.name.startswith(client)]
    assert any("Bad Request" in line for line in served)
    assert not [line for line in served if GOOD in line or WRONG in line]


@pytest.mark.django_db(transaction=True)
def test_bad_repository_params_are_400s_naming_the_field(sdk, live_server, api_key, settings, git_host, no_turns):
    settings.MANGO_VAULT_KEY = [KEY]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    agent, env = _agent_env(sdk)

    def create(resource: dict) -> str:
        with pytest.raises(anthropic.BadRequestError) as caught:
            sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=[resource])
        assert caught.value.body["error"]["type"] == "invalid_request_error"
        return caught.value.body["error"]["message"]

    repo = {"type": "github_repository", "authorization_token": GOOD}
    # The guard: a loopback address, and a name that resolves to one, unless listed.
    for url in (git_host.url("app"), git_host.url("app", host="localhost"), "http://[::1]:8810/app.git"):
        message = create({**repo, "url": url})
        assert message.startswith("resources[0].url:") and "MANGO_OUTBOUND_PRIVATE_HOSTS" in message
        assert "127.0.0.1)" not in message  # the resolved address is not echoed
    assert "credentials" in create({**repo, "url": f"https://x:{GOOD}@github.com/org/app.git"})
    assert "query" in create({**repo, "url": f"https://github.com/org/app.git?access_token={GOOD}"})
    assert "query" in create({**repo, "url": "https://github.com/org/app.git#main"})
    assert "scheme" in create({**repo, "url": "ssh://github.com/org/app.git"})
    assert "scheme" in create({**repo, "url": "file:///etc/app.git"})
    url = "https://github.com/org/app.git"
    assert create({**repo, "url": url, "checkout": {"type": "commit", "sha": "abc"}}).startswith(
        "resources[0].checkout.sha"
    )
    assert "checkout.name" in create({**repo, "url": url, "checkout": {"type": "branch", "name": "../x"}})
    assert "checkout" in create({**repo, "url": url, "checkout": {"type": "tag", "name": "v1"}})
    assert "mount_path" in create({**repo, "url": url, "mount_path": "/etc/app"})
    assert "mount_path" in create({**repo, "url": url, "mount_path": "/workspace"})
    assert "mount_path" in create({**repo, "url": "https://github.com/"})
    both = [{**repo, "url": url}, {**repo, "url": "https://gitlab.com/group/app"}]
    with pytest.raises(anthropic.BadRequestError, match=r"resources\[1\].mount_path"):
        sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=both)
    settings.MANGO_VAULT_KEY = []
    assert "MANGO_VAULT_KEY" in create({**repo, "url": url})
    # No error message carries the token.
    assert SessionResource.objects.count() == 0

    settings.MANGO_VAULT_KEY = [KEY]
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with pytest.raises(anthropic.BadRequestError, match=r"resource\.url") as caught:
        _add_repository(sdk, session.id, {**repo, "url": git_host.url("app")})
    assert GOOD not in str(caught.value.body)
    self_hosted = sdk.beta.environments.create(name="mine", config={"type": "self_hosted"})
    with pytest.raises(anthropic.BadRequestError, match="cloud environment"):
        sdk.beta.sessions.create(agent=agent.id, environment_id=self_hosted.id, resources=[{**repo, "url": url}])


# --- the worker's git adapter ------------------------------------------------------------------


def test_clone_connects_to_the_checked_address_only(settings, git_host, monkeypatch):
    """git is pinned to the address the guard checked: a name only this process resolves (as a
    rebinding DNS would answer the check) is cloned from that address, git's own lookup unused."""
    name = "git.mango-pinned.test"
    assert subprocess.run(["getent", "hosts", name], capture_output=True).returncode != 0
    real = socket.getaddrinfo

    def resolver(host, port, *args, **kwargs):
        if host == name:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"{name}:{PORT}"]
    work = git.clone(url=git_host.url("app", host=name), token=GOOD, checkout=None, max_bytes=10**8, timeout=30)
    try:
        tree = work / "tree"
        assert (tree / "README.md").read_text() == "hello again\n"
        config = (tree / ".git" / "config").read_text()
        assert git_host.url("app", host=name) in config
        assert GOOD not in config and "extraheader" not in config.lower() and "curlopt" not in config.lower()
        assert (tree / ".git" / "shallow").exists()  # depth 1
        assert not list((tree / ".git" / "hooks").glob("*")) if (tree / ".git" / "hooks").exists() else True
    finally:
        git.discard(work)
    assert not work.exists()

    # Not listed: refused after DNS, before any connection.
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    seen = len(git_host.seen)
    with pytest.raises(git.CloneFailed) as caught:
        git.clone(url=git_host.url("app", host=name), token=GOOD, checkout=None, max_bytes=10**8, timeout=30)
    assert caught.value.failure.type == "repository_clone_error"
    assert "private address" in caught.value.failure.message and "127.0.0.1" not in caught.value.failure.message
    assert len(git_host.seen) == seen


def test_redirects_are_not_followed(settings, git_host):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED]
    before = len(git_host.seen)
    with pytest.raises(git.CloneFailed) as caught:
        git.clone(url=git_host.url("moved/app"), token=GOOD, checkout=None, max_bytes=10**8, timeout=30)
    assert caught.value.failure.type == "repository_clone_error"
    paths = [path for path, _ in git_host.seen[before:]]
    assert paths and all(path.startswith("/moved/") for path in paths)


def test_the_size_and_time_bounds_kill_the_clone(settings, git_host):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED]
    before = set(os.listdir(git.scratch_root()))
    with pytest.raises(git.CloneFailed, match="MANGO_REPOSITORY_MAX_BYTES") as caught:
        git.clone(url=git_host.url("big"), token=GOOD, checkout=None, max_bytes=BIG_BYTES // 3, timeout=30)
    assert caught.value.failure.type == "repository_clone_error"
    git_host.delay = 3
    try:
        started = time.monotonic()
        with pytest.raises(git.CloneFailed, match="longer than"):
            git.clone(url=git_host.url("app"), token=GOOD, checkout=None, max_bytes=10**8, timeout=1)
        assert time.monotonic() - started < 2.5
    finally:
        git_host.delay = 0
    assert set(os.listdir(git.scratch_root())) == before  # nothing left behind


@pytest.mark.django_db
def test_a_hostile_workspace_cannot_make_the_worker_hold_more(settings, git_host, tmp_path):
    """Eight clones at once from one workspace: at most MANGO_WORKSPACE_REPOSITORY_CLONES run (the
    git host sees no more in flight), each bounded so that the workspace's clones on disk never
    pass MANGO_WORKSPACE_REPOSITORY_DISK_BYTES; another workspace is not held up."""
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED]
    settings.MANGO_REPOSITORY_SCRATCH_DIR = str(tmp_path)
    settings.MANGO_WORKSPACE_REPOSITORY_CLONES = 2
    settings.MANGO_WORKSPACE_REPOSITORY_DISK_BYTES = 2 * 1024 * 1024
    assert clone_max_bytes() == 1024 * 1024
    hostile, other = f"wrkspc_{uuid.uuid4().hex}", f"wrkspc_{uuid.uuid4().hex}"
    results, peak_disk, stop = [], [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak_disk[0] = max(peak_disk[0], git._size(tmp_path))
            time.sleep(0.02)

    def one(name: str):
        slot = clone_slot(workspace_id=hostile, deadline=time.monotonic() + 60, should_stop=lambda: False)
        try:
            work = git.clone(url=git_host.url(name), token=GOOD, checkout=None, max_bytes=clone_max_bytes(), timeout=60)
            git.discard(work)
            results.append((name, "ok", ""))
        except git.CloneFailed as exc:
            results.append((name, exc.failure.type, exc.failure.message))
        finally:
            thread_gate().release(slot)

    git_host.delay = 0.5
    git_host.peak_in_flight = 0
    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=one, args=("big" if n % 2 else "app",)) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        # The hostile workspace holds both its slots; another workspace gets one at once.
        started = time.monotonic()
        slot = clone_slot(workspace_id=other, deadline=time.monotonic() + 5, should_stop=lambda: False)
        assert time.monotonic() - started < 0.5
        thread_gate().release(slot)
        for thread in threads:
            thread.join(90)
    finally:
        git_host.delay = 0
        stop.set()
        sampler.join()
    # The small ones are cloned; the big ones pass the bound, and the message says so.
    outcomes = sorted(results)
    expected = [("app", "ok")] * 4 + [("big", "repository_clone_error")] * 4
    assert [(name, kind) for name, kind, _ in outcomes] == expected, outcomes
    assert all("larger than the 1048576 bytes" in message for name, _, message in outcomes if name == "big"), outcomes
    assert git_host.peak_in_flight <= 2
    assert peak_disk[0] <= settings.MANGO_WORKSPACE_REPOSITORY_DISK_BYTES + 256 * 1024  # one poll's overshoot
    assert os.listdir(tmp_path) == []


# --- in real sandboxes, cloned by a real worker ------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.slow
def test_checkouts_in_the_sandbox_without_the_token(sdk, live_server, api_key, model, worker, git_host, docker_client):
    agent, env = _agent_env(sdk)
    old, tip = git_host.shas["main"][0], git_host.shas["feature"][-1]
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "github_repository", "url": git_host.url("app"), "authorization_token": GOOD},
            {
                "type": "github_repository",
                "url": git_host.url("app"),
                "authorization_token": GOOD,
                "checkout": {"type": "branch", "name": "feature"},
                "mount_path": "/workspace/feature",
            },
            {
                "type": "github_repository",
                "url": git_host.url("app"),
                "authorization_token": GOOD,
                "checkout": {"type": "commit", "sha": old},  # not a tip: the whole history is fetched
                "mount_path": "/workspace/old",
            },
            {
                "type": "github_repository",
                "url": git_host.url("app"),
                "authorization_token": GOOD,
                "checkout": {"type": "commit", "sha": tip},  # a tip: fetched alone at depth 1
                "mount_path": "/opt/tip",
            },
        ],
    )
    output = _turn(
        sdk,
        model,
        session.id,
        "cat /workspace/app/README.md /workspace/feature/feature.txt /workspace/old/README.md /opt/tip/feature.txt;"
        " /workspace/app/run.sh; cat /workspace/app/src/lib/deep.txt;"
        " echo change >> /workspace/app/README.md && echo W",
    )
    assert output.split() == ["hello", "again", "feature", "hello", "feature", "hi", "deep", "W"], output
    assert not [e for e in _events(sdk, session.id) if e.type == "session.error"]

    sbx = lambda command: _exec(docker_client, session.id, command)  # noqa: E731
    assert sbx("cat /workspace/old/.git/HEAD").strip() == old
    assert sbx("cat /opt/tip/.git/HEAD").strip() == tip and sbx("test -f /opt/tip/.git/shallow && echo S") == "S\n"
    assert sbx("test -f /workspace/old/.git/shallow || echo FULL") == "FULL\n"
    assert "ref: refs/heads/feature" in sbx("cat /workspace/feature/.git/HEAD")
    config = sbx("cat /workspace/app/.git/config")
    assert f"url = {git_host.url('app')}" in config
    assert "extraheader" not in config.lower() and "x-access-token" not in config
    assert (
        sbx("stat -c %u /workspace/app /workspace/app/README.md /workspace/app/.git/config").split()
        == [str(django_settings.MANGO_SANDBOX_UID)] * 3
    )
    # The token is nowhere in the sandbox: not in its environment, its processes', nor any file.
    environments = sbx("env; cat /proc/*/environ 2>/dev/null")
    assert "PATH=" in environments and GOOD not in environments
    tree = sbx(f"grep -rlF {GOOD} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; echo END")
    assert tree == "END\n"
    assert GOOD in [token for _, token in git_host.seen]
    assert _scratch_entries(worker) == []  # the clones' scratch is gone
    # git works on the tree, as the sandbox user, and its remote carries no credentials.
    output = _turn(
        sdk,
        model,
        session.id,
        "cd /workspace/app && git status --short && git log --format=%s -1 && git remote -v && "
        "git -C /workspace/feature rev-parse --abbrev-ref HEAD",
    )
    assert " M README.md" in output and f"origin\t{git_host.url('app')} (fetch)" in output, output
    assert output.split()[-1] == "feature" and GOOD not in output, output


@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.slow
def test_repository_errors_rotation_and_adding_to_a_running_sandbox(
    sdk, live_server, api_key, model, worker, git_host, docker_client, settings
):
    # The API may reach `localhost` (as if its resolver had answered a public address then); the
    # worker resolves it again at clone time and finds it private.
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED, f"localhost:{PORT}"]
    agent, env = _agent_env(sdk)
    app = git_host.url("app")

    def repo(mount: str, **fields) -> dict:
        return {"type": "github_repository", "url": app, "authorization_token": GOOD, "mount_path": mount, **fields}

    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            repo("/workspace/auth", authorization_token=WRONG),
            repo("/workspace/forbidden", authorization_token=NOACCESS),
            repo("/workspace/nothere", url=git_host.url("nothere")),
            repo("/workspace/nobranch", checkout={"type": "branch", "name": "nope"}),
            repo("/workspace/nocommit", checkout={"type": "commit", "sha": "0" * 40}),
            repo("/workspace/big", url=git_host.url("big")),
            repo("/workspace/local", url=git_host.url("app", host="localhost")),
            repo("/workspace/public", authorization_token=None),
        ],
    )
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [ALLOWED]
    auth_id = session.resources[0].id
    output = _turn(sdk, model, session.id, "ls /workspace; echo RAN")
    assert output.split() == ["RAN"]  # the tool call ran; none of the repositories is there

    events = _events(sdk, session.id)
    errors = [e for e in events if e.type == "session.error"]
    kinds = [(e.error.type, e.error.repository_url, e.error.retry_status.type) for e in errors]
    assert kinds == [
        ("repository_authentication_error", app, "retrying"),
        ("repository_forbidden_error", app, "retrying"),
        ("repository_not_found_error", git_host.url("nothere"), "retrying"),
        ("repository_checkout_error", app, "retrying"),
        ("repository_checkout_error", app, "retrying"),
        ("repository_clone_error", git_host.url("big"), "retrying"),
        ("repository_clone_error", git_host.url("app", host="localhost"), "retrying"),
        ("repository_authentication_error", app, "retrying"),  # no token for a private repository
    ]
    assert "'nope'" in errors[3].error.message and "0" * 40 in errors[4].error.message
    assert "MANGO_REPOSITORY_MAX_BYTES" in errors[5].error.message
    assert "private address" in errors[6].error.message and "127.0.0.1" not in errors[6].error.message
    first_result = next(i for i, e in enumerate(events) if e.type == "agent.tool_result")
    assert all(events.index(e) < first_result for e in errors)  # before the tool call's result
    assert events[-1].type == "session.status_idle"

    # A second tool call does not try them again (nothing changed) ...
    assert _turn(sdk, model, session.id, "echo AGAIN").split() == ["AGAIN"]
    assert len([e for e in _events(sdk, session.id) if e.type == "session.error"]) == 8

    # ... a rotated token is used by the next clone, and a repository added to the running
    # sandbox is cloned at the next tool call.
    sdk.beta.sessions.resources.update(auth_id, session_id=session.id, authorization_token=GOOD)
    added = _add_repository(sdk, session.id, repo("/workspace/added", checkout={"type": "branch", "name": "feature"}))
    seen = len(git_host.seen)
    output = _turn(sdk, model, session.id, "cat /workspace/auth/README.md /workspace/added/feature.txt")
    assert output.split() == ["hello", "again", "feature"]
    assert {token for _, token in git_host.seen[seen:]} == {GOOD}
    assert len([e for e in _events(sdk, session.id) if e.type == "session.error"]) == 8
    assert SessionResource.objects.get(id=added.id).placed_ref

    # Deleting a placed repository removes its tree from the sandbox.
    sdk.beta.sessions.resources.delete(added.id, session_id=session.id)
    assert _exec(docker_client, session.id, "test -e /workspace/added || echo GONE") == "GONE\n"
    assert _scratch_entries(worker) == []

    # The tokens are in no response, event, log line or database row (only ciphertext is).
    wire = sdk.with_raw_response.beta.sessions.events.list(session.id, limit=1000).http_response.text
    wire += sdk.with_raw_response.beta.sessions.resources.list(session.id).http_response.text
    log = Path(worker.log_path).read_text(errors="replace")
    cfg = connection.settings_dict
    dump = subprocess.run(
        ["pg_dump", "-h", cfg["HOST"] or "127.0.0.1", "-p", str(cfg["PORT"] or 5432), "-U", cfg["USER"], cfg["NAME"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "repository_authentication_error" in dump and SessionResource.objects.filter(session_id=session.id).exists()
    for token in (GOOD, WRONG, NOACCESS):
        assert token not in wire and token not in log and token not in dump


@pytest.mark.django_db(transaction=True)
def test_admin_shows_repositories_without_the_token(admin_client, sdk, live_server, api_key, guard, git_host, no_turns):
    agent, env = _agent_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[{"type": "github_repository", "url": git_host.url("app"), "authorization_token": GOOD}],
    )
    page = admin_client.get(f"/admin/agent_sessions/session/{session.id}/change/")
    body = page.content.decode()
    assert page.status_code == 200 and git_host.url("app") in body and "token stored, encrypted" in body
    stored = SessionResource.objects.get(session_id=session.id).authorization_token
    assert GOOD not in body and stored not in body
