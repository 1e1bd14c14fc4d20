"""A deployment whose sessions mount a file, its fire killed (kill -9) after the session and its
copy of the file were made and before the commit: nothing of the run commits, and the copy's
object, which no row and no intent names (its intent rolled back with the fire's transaction),
is collected by the files reconciliation's bucket scan; the restarted fleet runs the time once,
with a copy of its own."""

from datetime import timedelta

import pytest

from deployments.models import DeploymentRun
from files import reconcile
from files.models import File
from sessions.models import Session
from tests.deployments.test_exactly_once import fire_process, scheduled_deployment
from tests.files.conftest import assert_store_consistent, bucket_keys, make_file

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_fire_killed_before_commit_leaves_its_file_copy_to_be_collected(api_key, s3_bucket):
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
    leaked = bucket_keys(workspace.id).keys() - {source.object_key}
    assert len(leaked) == 1  # the copy's object, named by nothing

    report = reconcile.reconcile(grace_seconds=0, scan_orphans=True)
    assert report.orphan_objects_deleted >= 1
    assert set(bucket_keys(workspace.id)) == {source.object_key}

    again = fire_process()
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    (run,) = DeploymentRun.objects.filter(deployment=deployment)
    session = Session.objects.get(id=run.session_id)
    (copy,) = File.objects.filter(workspace=workspace).exclude(id=source.id)
    assert copy.scope_session_id == session.id and session.resources.get().file_id == copy.id
    assert_store_consistent(workspace.id)
