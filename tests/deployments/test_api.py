"""client.beta.deployments and client.beta.deployment_runs through the official SDK, strictly
validating every response: the 10 methods, their filters, and a run's session (deployment_id,
initial events, budget, vaults)."""

from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from deployments.models import Deployment
from sessions.models import SessionEvent

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "nightly report"}]}


@pytest.fixture
def agent(sdk):
    return sdk.beta.agents.create(name="reporter", model="claude-sonnet-4-5")


@pytest.fixture
def environment(sdk):
    return sdk.beta.environments.create(name="self", config={"type": "self_hosted"})


def test_the_ten_methods(sdk, agent, environment):
    created = sdk.beta.deployments.create(
        agent=agent.id,
        environment_id=environment.id,
        initial_events=[MESSAGE, {"type": "system.message", "content": [{"type": "text", "text": "be brief"}]}],
        name="nightly",
        description="reports",
        metadata={"team": "ops"},
        schedule={"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Paris"},
    )
    assert created.id.startswith("depl_") and created.status == "active" and created.paused_reason is None
    assert created.agent.id == agent.id and created.agent.version == agent.version
    assert created.schedule.expression == "0 9 * * 1-5" and len(created.schedule.upcoming_runs_at) == 5
    first = created.schedule.upcoming_runs_at[0]
    assert first.astimezone(UTC).hour in (7, 8) and first.weekday() < 5  # 09:00 Paris, a weekday
    assert created.schedule.last_run_at is None and created.initial_events[0].type == "user.message"

    assert sdk.beta.deployments.retrieve(created.id).name == "nightly"
    updated = sdk.beta.deployments.update(created.id, name="daily", metadata={"team": None, "tier": "1"}, schedule=None)
    assert updated.name == "daily" and updated.metadata == {"tier": "1"} and updated.schedule is None
    assert Deployment.objects.get(id=created.id).next_run_at is None

    paused = sdk.beta.deployments.pause(created.id)
    assert paused.status == "paused" and paused.paused_reason.type == "manual"
    assert [d.id for d in sdk.beta.deployments.list(status="paused")] == [created.id]
    assert list(sdk.beta.deployments.list(status="active")) == []

    # Run now: allowed while paused (as the SDK documents); one session at once.
    run = sdk.beta.deployments.run(created.id)
    assert run.id.startswith("drun_") and run.error is None and run.trigger_context.type == "manual"
    session = sdk.beta.sessions.retrieve(run.session_id)
    assert session.deployment_id == created.id
    events = list(SessionEvent.objects.filter(session_id=run.session_id).order_by("seq").values_list("type", flat=True))
    assert events[:2] == ["user.message", "system.message"]
    assert [s.id for s in sdk.beta.sessions.list(deployment_id=created.id)] == [run.session_id]

    unpaused = sdk.beta.deployments.unpause(created.id)
    assert unpaused.status == "active" and unpaused.paused_reason is None
    assert sdk.beta.deployment_runs.retrieve(run.id).session_id == run.session_id
    assert [r.id for r in sdk.beta.deployment_runs.list(deployment_id=created.id, trigger_type="manual")] == [run.id]
    assert list(sdk.beta.deployment_runs.list(trigger_type="schedule")) == []
    assert list(sdk.beta.deployment_runs.list(has_error=True)) == []
    assert list(sdk.beta.deployment_runs.list(deployment_id="depl_nothing")) == []
    later = datetime.now(UTC) + timedelta(hours=1)
    assert list(sdk.beta.deployment_runs.list(created_at_gte=later)) == []

    archived = sdk.beta.deployments.archive(created.id)
    assert archived.archived_at is not None and archived.status == "active"
    assert list(sdk.beta.deployments.list()) == []
    assert [d.id for d in sdk.beta.deployments.list(include_archived=True)] == [created.id]
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.deployments.run(created.id)


def test_refusals_name_the_field(sdk, agent, environment):
    def create(**changes):
        body = {"agent": agent.id, "environment_id": environment.id, "initial_events": [MESSAGE], "name": "x"}
        return sdk.beta.deployments.create(**{**body, **changes})

    for schedule, field in [
        ({"type": "cron", "expression": "@daily", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 9 * * 1#2", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 9 * * 1", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "61 * * * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus"}, "schedule.timezone"),
    ]:
        with pytest.raises(anthropic.BadRequestError) as refused:
            create(schedule=schedule)
        assert field in str(refused.value), (schedule, refused.value)
    with pytest.raises(anthropic.BadRequestError, match="initial_events"):
        create(initial_events=[])
    with pytest.raises(anthropic.BadRequestError, match="vault"):
        create(vault_ids=["vlt_missing"])
    with pytest.raises(anthropic.NotFoundError):
        create(agent="agent_missing")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.deployments.retrieve("depl_missing")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.deployment_runs.retrieve("drun_missing")


def test_a_workspace_holds_at_most_its_limit_of_live_deployments(sdk, agent, environment, settings):
    """A tenant cannot make the beat hold unbounded schedules: past MANGO_WORKSPACE_MAX_DEPLOYMENTS
    live deployments, one more is a 400 naming the setting; archiving one makes room."""
    settings.MANGO_WORKSPACE_MAX_DEPLOYMENTS = 2
    body = {"agent": agent.id, "environment_id": environment.id, "initial_events": [MESSAGE]}
    first, _ = (sdk.beta.deployments.create(name=f"d{i}", **body) for i in range(2))
    with pytest.raises(anthropic.BadRequestError, match="MANGO_WORKSPACE_MAX_DEPLOYMENTS"):
        sdk.beta.deployments.create(name="d2", **body)
    assert Deployment.objects.count() == 2
    sdk.beta.deployments.archive(first.id)
    assert sdk.beta.deployments.create(name="d3", **body).name == "d3"
