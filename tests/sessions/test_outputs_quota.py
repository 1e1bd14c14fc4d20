"""Output publication over the workspace's Files quota: a session.error that names the quota,
nothing published, nothing left in the bucket or the database; the session goes on."""

import pytest

from files.models import File, StorageIntent
from files.quotas import workspace_usage
from sessions.models import SessionEvent
from sessions.services.outputs import outputs_publish_at_idle
from tests.factories import with_sandbox
from tests.files.conftest import bucket_keys
from tests.sessions.test_outputs import OUT, _new_session, sh

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def test_publication_over_the_quota_is_a_session_error_and_leaves_nothing(api_key, s3_bucket, settings):
    workspace = api_key.workspace
    session = with_sandbox(_new_session(workspace))
    sh(session, f"echo small > {OUT}/a.txt")
    assert outputs_publish_at_idle(session=session, interrupted=False).added == ["a.txt"]
    published_keys = bucket_keys(workspace.id)
    settings.MANGO_WORKSPACE_FILES_MAX_BYTES = workspace_usage(workspace.id).bytes + 1000

    sh(session, f"head -c 5000 /dev/zero > {OUT}/big.bin && echo changed > {OUT}/a.txt")
    assert outputs_publish_at_idle(session=session, interrupted=False) is None
    (error,) = SessionEvent.objects.filter(session=session, type="session.error")
    assert "storage quota" in error.payload["error"]["message"]
    # The previously published tree is unchanged, and nothing staged was left behind.
    assert {f.output_path for f in File.objects.filter(scope_session_id=session.id, state="ready")} == {"a.txt"}
    assert bucket_keys(workspace.id) == published_keys
    assert not StorageIntent.objects.filter(workspace=workspace, state=StorageIntent.State.OPEN).exists()

    sh(session, f"rm {OUT}/big.bin")  # back under the quota: the next idle publishes again
    assert outputs_publish_at_idle(session=session, interrupted=False).replaced == ["a.txt"]
