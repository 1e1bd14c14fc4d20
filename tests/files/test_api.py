"""The Files routes through Django's test client, against the real database and the real store."""

import hashlib
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from core.errors import RequestTooLarge
from files import selectors, services, storage
from files.models import File, StorageIntent, file_id_time, new_file_id
from tests.files.conftest import (
    assert_store_consistent,
    bucket_keys,
    make_file,
    multipart_uploads,
    object_sha256,
    temp_entries,
)

pytestmark = pytest.mark.django_db

BOUNDARY = "mango-api-test-boundary"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def multipart(*parts, closing_crlf=True) -> bytes:
    out = b""
    for name, filename, content_type, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n".encode()
        if content_type:
            out += f"Content-Type: {content_type}\r\n".encode()
        out += b"\r\n" + data + b"\r\n"
    return out + f"--{BOUNDARY}--".encode() + (b"\r\n" if closing_crlf else b"")


def post_raw(api: Client, raw: bytes, **extra):
    return api.generic("POST", "/v1/files", data=raw, content_type=f"multipart/form-data; boundary={BOUNDARY}", **extra)


def upload(api: Client, data: bytes, filename="notes.txt", content_type="text/plain", fields=()):
    return post_raw(api, multipart(*fields, ("file", filename, content_type, data)))


def assert_error(response, status: int, error_type: str, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == error_type
    if code:
        assert body["error"]["details"]["error_code"] == code
    return body


# --- upload ---------------------------------------------------------------------------------


def test_upload_returns_exact_metadata_and_stores_bytes(api, workspace):
    data = b"line one\nline two\n"
    response = upload(api, data)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {
        "id",
        "type",
        "filename",
        "mime_type",
        "size_bytes",
        "created_at",
        "downloadable",
        "expires_at",
        "scope",
    }
    assert body["id"].startswith("file_") and body["type"] == "file"
    assert (body["filename"], body["mime_type"], body["size_bytes"]) == ("notes.txt", "text/plain", len(data))
    assert body["downloadable"] is False and body["scope"] is None and body["expires_at"] is None
    assert RFC3339.match(body["created_at"])
    row = File.objects.get(pk=body["id"])
    assert row.sha256 == hashlib.sha256(data).hexdigest()
    assert row.origin == File.Origin.UPLOAD and row.state == File.State.READY
    assert row.object_key.startswith(f"files/{workspace.id}/") and "notes" not in row.object_key
    assert object_sha256(row.object_key) == row.sha256
    assert StorageIntent.objects.get(object_key=row.object_key).state == StorageIntent.State.COMMITTED
    assert api.get(f"/v1/files/{body['id']}").json() == body


def test_part_without_filename_becomes_unnamed_with_extension(api, workspace):
    response = post_raw(api, multipart(("file", None, "application/pdf", b"%PDF-1.4")))
    assert response.status_code == 200, response.content
    assert response.json()["filename"] == "unnamed.pdf"
    assert response.json()["mime_type"] == "application/pdf"
    response = post_raw(api, multipart(("file", None, None, b"abc")))
    assert (response.json()["filename"], response.json()["mime_type"]) == ("unnamed.bin", "application/octet-stream")


def test_mime_type_falls_back_to_extension(api, workspace):
    response = post_raw(api, multipart(("file", "dir/sub/table.csv", None, b"a,b\n")))
    assert (response.json()["filename"], response.json()["mime_type"]) == ("table.csv", "text/csv")


def test_expires_in_seconds_sets_expires_at(api, workspace):
    before = timezone.now()
    response = upload(api, b"x", fields=[("expires_in_seconds", None, None, b"3600")])
    assert response.status_code == 200, response.content
    expires_at = File.objects.get(pk=response.json()["id"]).expires_at
    assert before + timedelta(seconds=3600) <= expires_at <= timezone.now() + timedelta(seconds=3600)
    assert RFC3339.match(response.json()["expires_at"])


@pytest.mark.parametrize("value", [b"3599", b"7776001", b"soon", b""])
def test_expires_in_seconds_out_of_range_is_400(api, workspace, value):
    response = upload(api, b"x", fields=[("expires_in_seconds", None, None, value)])
    assert_error(response, 400, "invalid_request_error")
    assert "expires_in_seconds" in response.json()["error"]["message"]
    assert File.objects.count() == 0


@pytest.mark.parametrize(
    "raw, message",
    [
        (multipart(), "Missing file"),
        (multipart(("upload", "a.txt", "text/plain", b"x")), "named `file`"),
        (multipart(("file", "a.txt", "text/plain", b"x"), ("file", "b.txt", "text/plain", b"y")), "More than one"),
        (b"--" + BOUNDARY.encode() + b"\r\nContent-Disposition: form-data; name=file\r\n\r\nabc", "ended inside"),
    ],
)
def test_bad_multipart_is_400_and_leaves_nothing(api, workspace, raw, message):
    before_tmp = temp_entries()
    body = assert_error(post_raw(api, raw), 400, "invalid_request_error")
    assert message in body["error"]["message"]
    assert File.objects.count() == 0
    assert not StorageIntent.objects.filter(state=StorageIntent.State.OPEN).exists()
    assert bucket_keys(workspace.id) == {}
    assert temp_entries() == before_tmp


def test_non_multipart_upload_is_400(api, workspace):
    response = api.post("/v1/files", data={"file": "x"}, content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


def test_exactly_the_limit_is_accepted_one_more_byte_is_413(api, workspace, settings):
    settings.MANGO_FILE_MAX_BYTES = 1000
    ok = upload(api, b"a" * 1000)
    assert ok.status_code == 200, ok.content
    before_tmp = temp_entries()
    # With the trailing CRLF, Content-Length alone proves the file is too large.
    assert_error(upload(api, b"a" * 1001), 413, "request_too_large")
    # Without it, the declared length is ambiguous by two bytes: caught while streaming.
    raw = multipart(("file", "a.txt", "text/plain", b"a" * 1001), closing_crlf=False)
    assert_error(post_raw(api, raw), 413, "request_too_large")
    # A declared length far past the limit is refused before reading the body.
    huge = post_raw(api, multipart(("file", "a", None, b"a")), CONTENT_LENGTH="600000000")
    assert_error(huge, 413, "request_too_large")
    assert File.objects.count() == 1
    assert temp_entries() == before_tmp
    assert not StorageIntent.objects.filter(state=StorageIntent.State.OPEN).exists()
    assert_store_consistent(workspace.id)


def test_limit_while_streaming_aborts_the_multipart_upload(workspace):
    """Over the limit after several parts are already in the store: the multipart upload is
    aborted and nothing remains."""
    limit = 20 * 1024 * 1024
    chunk = b"z" * (1024 * 1024)
    before_tmp = temp_entries()
    seen = []

    def chunks():
        for _ in range(21):
            seen.append(len(multipart_uploads(workspace.id)))
            yield chunk
        yield b"!"

    with pytest.raises(RequestTooLarge):
        services.file_upload_stream(
            workspace=workspace, chunks=chunks(), filename="big", mime_type="text/plain", max_bytes=limit
        )
    assert max(seen) == 1, "the upload should have been a multipart upload in progress"
    assert multipart_uploads(workspace.id) == []
    assert bucket_keys(workspace.id) == {}
    assert File.objects.count() == 0
    assert StorageIntent.objects.get().state == StorageIntent.State.ROLLED_BACK
    assert temp_entries() == before_tmp


def test_multipart_sized_upload_round_trips(workspace):
    rng_data = hashlib.sha256(b"seed").digest() * (1024 * 1024 // 32)
    data = rng_data * 19 + b"tail"  # 19 MiB + 4 bytes: three parts
    pieces = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    file = services.file_upload_stream(
        workspace=workspace, chunks=pieces, filename="big.bin", mime_type="application/octet-stream", downloadable=True
    )
    assert file.size_bytes == len(data) and file.sha256 == hashlib.sha256(data).hexdigest()
    assert_store_consistent(workspace.id)


# --- metadata, content ----------------------------------------------------------------------


@pytest.fixture
def downloadable(workspace):
    return make_file(
        workspace, b"0123456789", filename="résumé 2026.txt", downloadable=True, scope_session_id="sesn_abc"
    )


def _content(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_download_streams_with_headers(api, downloadable):
    response = api.get(f"/v1/files/{downloadable.id}/content", headers={"accept": "application/binary"})
    assert response.status_code == 200
    assert _content(response) == b"0123456789"
    assert response["Content-Type"] == "text/plain"
    assert response["Content-Length"] == "10"
    assert response["ETag"] == f'"{downloadable.sha256}"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"] == (
        "attachment; filename=\"r_sum_ 2026.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%202026.txt"
    )


@pytest.mark.parametrize(
    "header, status, content, content_range",
    [
        ("bytes=2-5", 206, b"2345", "bytes 2-5/10"),
        ("bytes=7-", 206, b"789", "bytes 7-9/10"),
        ("bytes=-3", 206, b"789", "bytes 7-9/10"),
        ("bytes=8-100", 206, b"89", "bytes 8-9/10"),
        ("bytes=0-1,4-5", 200, b"0123456789", None),
        ("items=0-1", 200, b"0123456789", None),
    ],
)
def test_range_requests(api, downloadable, header, status, content, content_range):
    response = api.get(f"/v1/files/{downloadable.id}/content", headers={"range": header})
    assert response.status_code == status
    assert _content(response) == content
    assert response["Content-Length"] == str(len(content))
    assert response.get("Content-Range") == content_range


@pytest.mark.parametrize("header", ["bytes=10-", "bytes=10-20", "bytes=-0", "bytes=5-2"])
def test_unsatisfiable_range_is_416_envelope(api, downloadable, header):
    response = api.get(f"/v1/files/{downloadable.id}/content", headers={"range": header})
    assert_error(response, 416, "invalid_request_error", "range_not_satisfiable")
    assert response["Content-Range"] == "bytes */10"


def test_a_download_whose_object_was_lost_is_a_clear_404(api, downloadable):
    storage.delete_object(key=downloadable.object_key)
    for headers in ({}, {"range": "bytes=2-5"}):
        response = api.get(f"/v1/files/{downloadable.id}/content", headers=headers)
        body = assert_error(response, 404, "not_found_error", "object_missing")
        assert body["error"]["message"] == "The stored content is missing from the object store."


def test_etag_revalidation_and_if_range(api, downloadable):
    etag = f'"{downloadable.sha256}"'
    assert api.get(f"/v1/files/{downloadable.id}/content", headers={"if-none-match": etag}).status_code == 304
    stale = api.get(f"/v1/files/{downloadable.id}/content", headers={"range": "bytes=0-1", "if-range": '"other"'})
    assert stale.status_code == 200 and _content(stale) == b"0123456789"
    fresh = api.get(f"/v1/files/{downloadable.id}/content", headers={"range": "bytes=0-1", "if-range": etag})
    assert fresh.status_code == 206 and _content(fresh) == b"01"


def test_empty_downloadable_file(api, workspace):
    file = make_file(workspace, b"", filename="empty.txt", downloadable=True)
    response = api.get(f"/v1/files/{file.id}/content")
    assert response.status_code == 200 and _content(response) == b""
    assert response["ETag"] == f'"{hashlib.sha256(b"").hexdigest()}"'


def test_client_upload_content_is_not_downloadable(api, workspace):
    file_id = upload(api, b"secret").json()["id"]
    assert_error(api.get(f"/v1/files/{file_id}/content"), 400, "invalid_request_error", "file_not_downloadable")


def test_expired_file(api, workspace):
    file = make_file(workspace, b"old", downloadable=True)
    kept = make_file(workspace, b"new")
    File.objects.filter(pk=file.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert [f["id"] for f in api.get("/v1/files").json()["data"]] == [kept.id]
    assert api.get(f"/v1/files?ids[]={file.id}").json()["data"] == []
    assert_error(api.get(f"/v1/files/{file.id}/content"), 404, "not_found_error", "file_expired")
    assert_error(api.get(f"/v1/files/{file.id}"), 404, "not_found_error", "file_expired")
    assert services.files_expire() == 1
    assert not File.objects.filter(pk=file.pk).exists()
    assert_store_consistent(workspace.id)
    assert_error(api.get(f"/v1/files/{file.id}/content"), 404, "not_found_error")


def test_expired_file_can_still_be_deleted(api, workspace):
    file = make_file(workspace, b"old")
    File.objects.filter(pk=file.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api.delete(f"/v1/files/{file.id}").json() == {"id": file.id, "type": "file_deleted"}


# --- delete ---------------------------------------------------------------------------------


def test_delete_then_everything_is_404(api, workspace):
    file = make_file(workspace, b"bye", downloadable=True)
    response = api.delete(f"/v1/files/{file.id}", content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"id": file.id, "type": "file_deleted"}
    for method, path in [
        ("get", f"/v1/files/{file.id}"),
        ("get", f"/v1/files/{file.id}/content"),
        ("delete", f"/v1/files/{file.id}"),
    ]:
        assert_error(getattr(api, method)(path), 404, "not_found_error")
    assert not File.objects.filter(pk=file.pk).exists()
    assert bucket_keys(workspace.id) == {}
    assert StorageIntent.objects.get(kind="delete").state == StorageIntent.State.COMMITTED


def test_deleting_file_is_hidden_everywhere(api, workspace):
    file = make_file(workspace, b"x", downloadable=True)
    File.objects.filter(pk=file.pk).update(state=File.State.DELETING)
    assert api.get("/v1/files").json()["data"] == []
    assert api.get(f"/v1/files?ids[]={file.id}").json()["data"] == []
    for method, path in [("get", f"/v1/files/{file.id}"), ("get", f"/v1/files/{file.id}/content")]:
        assert_error(getattr(api, method)(path), 404, "not_found_error")
    assert_error(api.delete(f"/v1/files/{file.id}"), 404, "not_found_error")


@pytest.mark.parametrize("file_id", ["nope", "file_", "file_" + "x" * 300, "file_01m8ncfra5g2n1jwp5787r0t6r"])
def test_malformed_or_unknown_path_ids_are_404(api, workspace, file_id):
    for method, path in [("get", f"/v1/files/{file_id}"), ("get", f"/v1/files/{file_id}/content")]:
        assert_error(getattr(api, method)(path), 404, "not_found_error")
    assert_error(api.delete(f"/v1/files/{file_id}"), 404, "not_found_error")


# --- list -----------------------------------------------------------------------------------


def bulk_files(workspace, count: int, **fields) -> list[File]:
    """Rows only (list never touches the store), created like the service creates them."""
    rows = []
    for i in range(count):
        file_id = new_file_id()
        rows.append(
            File(
                id=file_id,
                workspace=workspace,
                created_at=file_id_time(file_id),
                filename=f"f{i}.txt",
                mime_type="text/plain",
                size_bytes=1,
                sha256="0" * 64,
                object_key=f"files/{workspace.id}/bulk-{file_id}",
                **fields,
            )
        )
    File.objects.bulk_create(rows)
    return sorted(rows, key=lambda f: (f.created_at, f.id), reverse=True)


def test_empty_list_envelope(api, workspace):
    assert api.get("/v1/files").json() == {
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
        "next_page": None,
    }


def test_page_cursor_walk(api, workspace):
    expected = [f.id for f in bulk_files(workspace, 25)]
    seen, page, pages = [], None, 0
    while True:
        query = "limit=10" + (f"&page={page}" if page else "")
        body = api.get(f"/v1/files?{query}").json()
        pages += 1
        seen += [f["id"] for f in body["data"]]
        assert body["first_id"] == body["data"][0]["id"] and body["last_id"] == body["data"][-1]["id"]
        page = body["next_page"]
        assert body["has_more"] is bool(page)
        if not page:
            break
        assert page.startswith("page_")
    assert seen == expected and pages == 3


def test_after_id_and_before_id_walk(api, workspace):
    expected = [f.id for f in bulk_files(workspace, 23)]
    seen, after = [], None
    while True:
        body = api.get("/v1/files?limit=10" + (f"&after_id={after}" if after else "")).json()
        seen += [f["id"] for f in body["data"]]
        if not body["has_more"]:
            break
        after = body["last_id"]
    assert seen == expected
    # Backwards from the oldest: each before_id page is the nearest newer files, newest first.
    back, before = [], expected[-1]
    while True:
        body = api.get(f"/v1/files?limit=10&before_id={before}").json()
        back = [f["id"] for f in body["data"]] + back
        assert body["next_page"] is None
        if not body["has_more"]:
            break
        before = body["first_id"]
    assert back == expected[:-1]


def test_cursor_of_a_deleted_file_still_pages(api, workspace):
    files = bulk_files(workspace, 5)
    File.objects.filter(pk=files[1].pk).delete()
    body = api.get(f"/v1/files?after_id={files[1].id}").json()
    assert [f["id"] for f in body["data"]] == [f.id for f in files[2:]]


def test_ids_filter(api, workspace, other_api_key):
    files = bulk_files(workspace, 5)
    foreign = bulk_files(other_api_key.workspace, 1)[0]
    query = "&".join(f"ids[]={i}" for i in [files[3].id, files[0].id, files[3].id, foreign.id, new_file_id()])
    body = api.get(f"/v1/files?{query}").json()
    assert [f["id"] for f in body["data"]] == [files[0].id, files[3].id]
    assert body["next_page"] is None and body["has_more"] is False
    # The repeated form without brackets is accepted too.
    assert [f["id"] for f in api.get(f"/v1/files?ids={files[2].id}").json()["data"]] == [files[2].id]


def test_scope_id_filter(api, workspace):
    top = bulk_files(workspace, 2)
    scoped = bulk_files(workspace, 3, scope_session_id="sesn_one", downloadable=True)
    bulk_files(workspace, 1, scope_session_id="sesn_two")
    body = api.get("/v1/files?scope_id=sesn_one&limit=2").json()
    assert [f["id"] for f in body["data"]] == [f.id for f in scoped[:2]]
    assert body["data"][0]["scope"] == {"type": "session", "id": "sesn_one"}
    rest = api.get(f"/v1/files?scope_id=sesn_one&limit=2&page={body['next_page']}").json()
    assert [f["id"] for f in rest["data"]] == [scoped[2].id] and rest["next_page"] is None
    # Without scope_id the list is the whole workspace (scope_id is a filter, not a partition).
    assert len(api.get("/v1/files").json()["data"]) == len(top) + 4


def test_beta_query_flag_is_ignored(api, workspace):
    bulk_files(workspace, 2)
    assert len(api.get("/v1/files?beta=true&limit=1").json()["data"]) == 1


@pytest.mark.parametrize(
    "query, message",
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("before_id=file_01m8ncfra5g2n1jwp5787r0t6r&after_id=file_01m8ncfra5g2n1jwp5787r0t6r", "cannot be combined"),
        ("page=page_bm90LWEtY3Vyc29y", "page"),
        ("page=garbage", "page"),
        ("after_id=not-a-file", "after_id"),
        ("before_id=file_zzz", "before_id"),
        ("ids[]=file_a&page=page_x", "ids cannot"),
        ("ids[]=file_a&limit=5", "ids cannot"),
        ("ids[]=../../etc", "malformed"),
        ("&".join(f"ids[]=file_{i}" for i in range(101)), "at most 100"),
    ],
)
def test_bad_list_queries_are_400(api, workspace, query, message):
    body = assert_error(api.get(f"/v1/files?{query}"), 400, "invalid_request_error")
    assert message in body["error"]["message"]


def test_tampered_cursor_is_400(api, workspace):
    files = bulk_files(workspace, 3)
    cursor = selectors.cursor_encode(selectors.Position(created_at=files[0].created_at, id=files[0].id))
    assert api.get(f"/v1/files?page={cursor}").status_code == 200
    forged = selectors.cursor_encode(selectors.Position(created_at=files[0].created_at, id=files[1].id))
    forged = forged[:-2] + ("AA" if forged[-2:] != "AA" else "BB")
    assert_error(api.get(f"/v1/files?page={forged}"), 400, "invalid_request_error")


# --- modes and failures ---------------------------------------------------------------------


def test_strict_mode_requires_the_files_beta(api, workspace, settings):
    settings.MANGO_STRICT = True
    file = make_file(workspace, b"x")
    for method, path in [("get", "/v1/files"), ("get", f"/v1/files/{file.id}"), ("delete", f"/v1/files/{file.id}")]:
        body = assert_error(getattr(api, method)(path), 400, "invalid_request_error")
        assert "files-api-2025-04-14" in body["error"]["message"]
    assert_error(upload(api, b"x"), 400, "invalid_request_error")
    assert File.objects.count() == 1
    beta = {"anthropic-beta": "other-beta, files-api-2025-04-14"}
    assert api.get("/v1/files", headers=beta).status_code == 200
    assert api.get(f"/v1/files/{file.id}", headers=beta).status_code == 200


def test_storage_not_configured_is_503(api, workspace, settings):
    settings.MANGO_FILE_S3_BUCKET = None
    for response in [api.get("/v1/files"), upload(api, b"x"), api.get("/v1/files/file_x")]:
        assert_error(response, 503, "api_error", "files_storage_not_configured")


def _store_at(settings, endpoint: str) -> None:
    storages = {**settings.STORAGES}
    storages["files"] = {**storages["files"], "OPTIONS": {**storages["files"]["OPTIONS"], "endpoint_url": endpoint}}
    settings.STORAGES = storages


def test_store_unreachable_upload_is_503_and_nothing_visible(api, workspace, settings):
    file = make_file(workspace, b"kept", downloadable=True)
    _store_at(settings, "http://127.0.0.1:9")
    body = assert_error(upload(api, b"y" * 100), 503, "api_error", "object_store_unavailable")
    assert body["error"]["message"]
    assert_error(api.get(f"/v1/files/{file.id}/content"), 503, "api_error")
    assert [f["id"] for f in api.get("/v1/files").json()["data"]] == [file.id]
    intent = StorageIntent.objects.get(state=StorageIntent.State.OPEN)
    assert intent.kind == "upload" and "Unavailable" in intent.last_error
    assert File.objects.count() == 1
