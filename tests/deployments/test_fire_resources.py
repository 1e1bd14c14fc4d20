"""A deployment whose sessions mount a file, its fire killed (kill -9) after the session and its
copy of the file were made and before the commit: nothing of the run commits, and the copy's
object is named by its upload intent, committed before the object was written on a connection
of its own (files.intents.upload_intent_open), so it outlived the fire's rollback. The periodic
`files.reconcile` task (no bucket scan) finds the intent's owner dead and deletes the object;
the restarted fleet runs the time once, with a copy of its own. A fire whose session is refused
after the copies were made (its transaction commits the failed run, not the copies) hands their
intents to reconciliation at once (files.reconcile_given_up)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Agent
from deployments.models import Deployment, DeploymentRun
from deployments.runs import deployment_fire
from files import liveness, reconcile
from files.models import File, StorageIntent
from files.tasks import files_reconcile
from sessions.models import Session
from tests.deployments.test_exactly_once import fire_process, scheduled_deployment
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_fire_killed_before_commit_leaves_its_file_copy_to_the_periodic_reconcile(api_key, s3_bucket):
    workspace = api_key.workspace
    source = make_file(workspace, b"report data", filename="report.txt")
    deployment = scheduled_deployment(workspace, due_ago=timedelta(seconds=5))
    deployment.resources = [{"type": "file", "file_id": source.id, "mount_path": "/mnt/report.txt"}]
    deployment.save(update_fields=["resources"])

    killed = fire_process("deployments.fire.before_commit")
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert not DeploymentRun.objects.filter(deployment=deployment).exists()
    assert not Session.objects.filter(deployment_id=deployment.id).exists()
    assert list(File.objects.filter(workspace=workspace).values_list("id", flat=True)) == [source.id]
    (leaked,) = bucket_keys(workspace.id).keys() - {source.object_key}  # the copy's object
    intent = StorageIntent.objects.get(object_key=leaked)
    assert (intent.kind, intent.state) == (StorageIntent.Kind.UPLOAD, StorageIntent.State.OPEN)

    report = files_reconcile()  # what beat runs every 5 minutes: no bucket scan, default grace
    assert report["uploads_rolled_back"] == 1 and report["orphan_objects_deleted"] == 0, report
    assert set(bucket_keys(workspace.id)) == {source.object_key}  # 0 orphan objects
    intent.refresh_from_db()
    assert intent.state == StorageIntent.State.ROLLED_BACK

    again = fire_process()
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    (run,) = DeploymentRun.objects.filter(deployment=deployment)
    session = Session.objects.get(id=run.session_id)
    (copy,) = File.objects.filter(workspace=workspace).exclude(id=source.id)
    assert copy.scope_session_id == session.id and session.resources.get().file_id == copy.id
    # The fire's transaction closed the copy's intent with its File row.
    assert StorageIntent.objects.get(object_key=copy.object_key).state == StorageIntent.State.COMMITTED
    assert not StorageIntent.objects.filter(workspace=workspace, state=StorageIntent.State.OPEN).exists()
    assert_store_consistent(workspace.id)


def test_a_fire_whose_session_is_refused_hands_its_copies_intents_to_reconciliation(api_key, s3_bucket):
    workspace = api_key.workspace
    source = make_file(workspace, b"report data", filename="report.txt")
    deployment = scheduled_deployment(workspace, due_ago=timedelta(seconds=5))
    deployment.resources = [{"type": "file", "file_id": source.id, "mount_path": "/mnt/report.txt"}]
    deployment.save(update_fields=["resources"])
    Agent.objects.filter(id=deployment.agent_id).update(archived_at=timezone.now())  # refused after the copy

    run = deployment_fire(deployment_id=deployment.id)
    assert run.error["type"] == "agent_archived_error" and run.session_id is None
    assert Deployment.objects.get(id=deployment.id).paused_at is not None
    # The copy's File rolled back with the refused session; its intent, committed on its own
    # connection and left open, is no longer this (living) process's.
    (intent,) = StorageIntent.objects.filter(workspace=workspace, state=StorageIntent.State.OPEN)
    assert intent.owner == liveness.GIVEN_UP
    assert reconcile.reconcile_given_up().uploads_rolled_back == 1
    assert not StorageIntent.objects.filter(workspace=workspace, state=StorageIntent.State.OPEN).exists()
    assert list(File.objects.filter(workspace=workspace).values_list("id", flat=True)) == [source.id]
    assert_store_consistent(workspace.id)
