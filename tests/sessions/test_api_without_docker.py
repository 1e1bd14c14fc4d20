"""The API process never calls Docker (issue 38): docker-compose.yml gives it no route there, so
every request that changes a session's sandbox — a resource added or deleted, a vault archived,
the session deleted — and the admin's session page work with Docker unreachable; the workers do
the Docker work. Real worker (it reaches dockerd), real store and database."""

import docker
import pytest

from sessions.models import Session
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

UNREACHABLE = "unix:///nonexistent/mango-no-docker.sock"


def test_requests_that_change_a_sandbox_work_with_docker_unreachable_and_workers_do_the_rest(
    sdk, model, celery_worker, api_key, admin_client, settings
):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    vault = sdk.beta.vaults.create(display_name="v")
    source = sdk.beta.files.upload(file=("data.csv", b"a,b\n", "text/csv"))
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        vault_ids=[vault.id],
        resources=[{"type": "file", "file_id": source.id, "mount_path": "/workspace/in/data.csv"}],
    )
    model.script([tool_use("bash", {"command": "cat /workspace/in/data.csv"}), text("read")])
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    wait_for(
        lambda: (
            Session.objects.get(pk=session.id).sandbox_state == "running"
            and sdk.beta.sessions.retrieve(session.id).status == "idle"
        ),
        60,
    )
    client = docker.from_env()
    container = client.containers.get(f"mango-sbx-{session.id}")

    settings.DOCKER_HOST = UNREACHABLE  # this process (the API) has no route to Docker from here on
    added = sdk.beta.sessions.resources.add(session.id, type="file", file_id=source.id, mount_path="/data/x.csv")
    first = next(r for r in sdk.beta.sessions.resources.list(session.id) if r.mount_path == "/workspace/in/data.csv")
    sdk.beta.sessions.resources.delete(first.id, session_id=session.id)
    sdk.beta.sessions.resources.delete(added.id, session_id=session.id)
    # A worker took the deleted resource out of the running sandbox.
    wait_for(lambda: container.exec_run(["test", "-e", "/workspace/in/data.csv"]).exit_code != 0, 30)
    sdk.beta.vaults.archive(vault.id)
    page = admin_client.get(f"/admin/agent_sessions/session/{session.id}/change/")
    assert page.status_code == 200 and container.id in page.content.decode()
    sdk.beta.sessions.delete(session.id)
    # A worker removed the sandbox.
    wait_for(lambda: not client.containers.list(all=True, filters={"label": f"mango.session={session.id}"}), 30)
    wait_for(lambda: Session.objects.get(pk=session.id).sandbox_state == Session.SandboxState.REMOVED, 30)
