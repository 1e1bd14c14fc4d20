"""Cross-workspace matrix: another workspace's file ids behave exactly like missing ones on every
route, and lists never leak."""

import pytest
from django.test import Client

from files.models import File
from tests.files.conftest import bucket_keys, make_file

pytestmark = pytest.mark.django_db

MISSING = "file_01m8ncfra5g2n1jwp5787r0t6r"


@pytest.fixture
def theirs(other_api_key, s3_bucket):
    return {
        "upload": make_file(other_api_key.workspace, b"theirs"),
        "output": make_file(
            other_api_key.workspace, b"out", downloadable=True, scope_session_id="sesn_theirs", origin="session_output"
        ),
    }


def _strip(body):
    """An error body without what legitimately differs (the id in the message, request ids)."""
    return {
        "status": body.status_code,
        "type": body.json()["error"]["type"],
        "details": body.json()["error"]["details"],
    }


@pytest.mark.parametrize("which", ["upload", "output"])
@pytest.mark.parametrize(
    "method, suffix",
    [("get", ""), ("get", "/content"), ("delete", "")],
)
def test_foreign_id_is_indistinguishable_from_missing(api, workspace, theirs, which, method, suffix):
    foreign = theirs[which]
    foreign_response = getattr(api, method)(f"/v1/files/{foreign.id}{suffix}")
    missing_response = getattr(api, method)(f"/v1/files/{MISSING}{suffix}")
    assert foreign_response.status_code == 404
    assert _strip(foreign_response) == _strip(missing_response)
    # Nothing happened to their file.
    assert File.objects.get(pk=foreign.pk).state == File.State.READY
    assert foreign.object_key in bucket_keys(foreign.workspace_id)


def test_lists_never_leak(api, workspace, theirs, other_api_key):
    mine = make_file(workspace, b"mine")
    queries = [
        "/v1/files",
        "/v1/files?limit=1000",
        "/v1/files?scope_id=sesn_theirs",
        f"/v1/files?ids[]={theirs['upload'].id}&ids[]={theirs['output'].id}&ids[]={mine.id}",
        f"/v1/files?after_id={theirs['upload'].id}",
        f"/v1/files?before_id={theirs['upload'].id}",
    ]
    for query in queries:
        ids = {f["id"] for f in api.get(query).json()["data"]}
        assert ids <= {mine.id}, query
    theirs_client = Client(headers={"x-api-key": str(other_api_key)})
    assert {f["id"] for f in theirs_client.get("/v1/files").json()["data"]} == {f.id for f in theirs.values()}


def test_cursor_from_another_workspace_reveals_nothing(api, workspace, theirs, other_api_key):
    make_file(workspace, b"mine")
    theirs_client = Client(headers={"x-api-key": str(other_api_key)})
    cursor = theirs_client.get("/v1/files?limit=1").json()["next_page"]
    body = api.get(f"/v1/files?page={cursor}").json()
    assert all(f["id"] not in {t.id for t in theirs.values()} for f in body["data"])
