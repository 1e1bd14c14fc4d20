"""Conformance through the official SDK, both generations, with strict response validation:
the installed anthropic (2.x: page/next_page, ids[], Bearer) and anthropic==1.1.0 (before_id /
after_id, x-api-key, files beta header, ?beta=true) in its own virtualenv."""

import json
import subprocess
from pathlib import Path

import anthropic
import pytest

from files.models import File
from tests.files.conftest import assert_store_consistent, make_file
from tests.sdk_venvs import sdk_python

pytestmark = pytest.mark.django_db(transaction=True)


def many_files(workspace, count=47):
    created = [make_file(workspace, f"file {i}".encode(), filename=f"f{i}.txt") for i in range(count)]
    return [f.id for f in sorted(created, key=lambda f: (f.created_at, f.id), reverse=True)]


def test_new_sdk_upload_from_path_and_bytes(sdk, workspace, tmp_path):
    path = tmp_path / "Quarterly report.pdf"
    path.write_bytes(b"%PDF-1.7 fake")
    from_path = sdk.beta.files.upload(file=path)
    assert (from_path.filename, from_path.mime_type, from_path.size_bytes) == (
        "Quarterly report.pdf",
        "application/pdf",
        13,
    )
    assert from_path.downloadable is False and from_path.scope is None and from_path.expires_at is None
    from_bytes = sdk.beta.files.upload(file=b"some raw bytes")
    assert (from_bytes.filename, from_bytes.mime_type) == ("unnamed.bin", "application/octet-stream")
    from_tuple = sdk.beta.files.upload(file=("data.json", b"{}", "application/json"), expires_in_seconds=7200)
    assert from_tuple.mime_type == "application/json" and from_tuple.expires_at is not None
    assert (from_tuple.expires_at - from_tuple.created_at).total_seconds() == pytest.approx(7200, abs=5)
    ga = sdk.files.upload(file=("ga.txt", b"ga"))
    assert ga.filename == "ga.txt"
    metadata = sdk.beta.files.retrieve_metadata(from_path.id)
    assert metadata == from_path
    assert sdk.files.retrieve_metadata(ga.id).id == ga.id
    assert_store_consistent(workspace.id)


def test_new_sdk_auto_pagination(sdk, workspace):
    expected = many_files(workspace)
    seen = [f.id for f in sdk.beta.files.list(limit=10)]
    assert seen == expected  # newest first, no duplicates, no gaps
    assert [f.id for f in sdk.files.list(limit=10)] == expected
    first = sdk.beta.files.list(limit=10)
    assert len(first.data) == 10 and first.next_page.startswith("page_")


def test_new_sdk_ids_and_scope(sdk, workspace):
    ids = many_files(workspace, 5)
    scoped = make_file(workspace, b"out", filename="out.txt", downloadable=True, scope_session_id="sesn_011abc")
    page = sdk.beta.files.list(ids=[ids[4], ids[1], "file_01m8ncfra5g2n1jwp5787r0t6r"])
    assert [f.id for f in page.data] == [ids[1], ids[4]] and page.next_page is None
    only_scoped = list(sdk.beta.files.list(scope_id="sesn_011abc"))
    assert [f.id for f in only_scoped] == [scoped.id]
    assert only_scoped[0].scope.type == "session" and only_scoped[0].scope.id == "sesn_011abc"
    assert sdk.beta.files.download(scoped.id).read() == b"out"
    assert sdk.files.download(scoped.id).read() == b"out"


def test_new_sdk_download_refused_delete_then_404(sdk, workspace):
    uploaded = sdk.beta.files.upload(file=("a.txt", b"secret"))
    with pytest.raises(anthropic.BadRequestError) as excinfo:
        sdk.beta.files.download(uploaded.id)
    assert type(excinfo.value).__name__ == "FileNotDownloadableError"
    assert excinfo.value.error_code == "file_not_downloadable"
    assert excinfo.value.request_id.startswith("req_")
    deleted = sdk.beta.files.delete(uploaded.id)
    assert (deleted.id, deleted.type) == (uploaded.id, "file_deleted")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.files.retrieve_metadata(uploaded.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.files.delete(uploaded.id)
    assert not File.objects.filter(pk=uploaded.id).exists()
    assert_store_consistent(workspace.id)


def test_new_sdk_expired_file(sdk, workspace):
    from datetime import timedelta

    from django.utils import timezone

    file = make_file(workspace, b"x", downloadable=True)
    File.objects.filter(pk=file.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(anthropic.NotFoundError) as excinfo:
        sdk.beta.files.download(file.id)
    assert type(excinfo.value).__name__ == "FileExpiredError"


def test_new_sdk_oversize_is_content_too_large(sdk, workspace, settings):
    settings.MANGO_FILE_MAX_BYTES = 100
    with pytest.raises(anthropic.ContentTooLargeError) as excinfo:
        sdk.beta.files.upload(file=("big.bin", b"x" * 101))
    assert excinfo.value.status_code == 413 and excinfo.value.type == "request_too_large"
    assert File.objects.count() == 0


def test_old_sdk_1_1_0(live_server, api_key, workspace, tmp_path):
    python = sdk_python("1.1.0")
    expected = many_files(workspace, 45)
    result = subprocess.run(
        [
            str(python),
            str(Path(__file__).parent / "sdk" / "old_sdk_calls.py"),
            live_server.url,
            str(api_key),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["version"] == "1.1.0"
    from_path, from_bytes = out["uploaded"]
    assert (from_path["filename"], from_path["mime_type"], from_path["size_bytes"]) == ("report.md", "text/markdown", 9)
    # Old httpx names a raw-bytes part "upload" itself (the new SDK sends no filename).
    assert (from_bytes["filename"], from_bytes["mime_type"]) == ("upload", "application/octet-stream")
    assert out["metadata"] == from_path
    # beta.files walks after_id/has_more; GA files walks page/next_page; same route, same order.
    everything = [from_bytes["id"], from_path["id"], *expected]
    assert out["beta_ids"] == everything
    assert out["ga_ids"] == everything
    assert out["beta_first_page"]["has_more"] is True
    assert out["download"]["class"] == "BadRequestError" and out["download"]["status"] == 400
    assert out["download"]["body"]["error"]["details"]["error_code"] == "file_not_downloadable"
    assert out["deleted"] == {"id": from_path["id"], "type": "file_deleted"}
    assert out["after_delete"]["class"] == "NotFoundError"
    assert out["wrong_key"]["class"] == "AuthenticationError"
