"""Files API views (api-contract.md §1): parse, call a service or selector, render."""

import re
from datetime import timedelta
from urllib.parse import quote

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core import metrics
from core.api import IgnoreAccept, query_int, query_list, rfc3339
from core.apiview import BetaApi
from core.errors import InvalidRequest, RequestTooLarge
from core.serializers import deleted_output, page_output
from files import naming, selectors, services, storage, uploads
from files.exceptions import FileNotDownloadable, RangeNotSatisfiable, StoredObjectMissing

EXPIRES_MIN_SECONDS = 3600
EXPIRES_MAX_SECONDS = 7_776_000
MAX_IDS = 100
_ID_SHAPE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DOWNLOAD_CHUNK_BYTES = 2 * 1024 * 1024


class FileScopeSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["session"])
    id = serializers.CharField()


class FileOutputSerializer(serializers.Serializer):
    """FileMetadata (api-contract.md §1). Fields are declared for the OpenAPI schema; rendering
    is one dict per File (lists render up to 1000 of them)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["file"])
    filename = serializers.CharField()
    mime_type = serializers.CharField()
    size_bytes = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    downloadable = serializers.BooleanField()
    expires_at = serializers.DateTimeField(allow_null=True)
    scope = FileScopeSerializer(allow_null=True)

    def to_representation(self, file):
        return {
            "id": file.id,
            "type": "file",
            "filename": file.filename,
            "mime_type": file.mime_type,
            "size_bytes": file.size_bytes,
            "created_at": rfc3339(file.created_at),
            "downloadable": file.downloadable,
            "expires_at": rfc3339(file.expires_at),
            "scope": file.scope,
        }


FileListOutputSerializer = page_output(
    "FileListOutputSerializer",
    FileOutputSerializer,
    has_more=serializers.BooleanField(),
    first_id=serializers.CharField(allow_null=True),
    last_id=serializers.CharField(allow_null=True),
)
FileDeletedOutputSerializer = deleted_output("FileDeletedOutputSerializer", type="file_deleted")


class FileUploadInputSerializer(serializers.Serializer):
    """Schema only: the body is read by files.uploads, streaming, never by a DRF parser."""

    expires_in_seconds = serializers.IntegerField(
        required=False, min_value=3600, max_value=7_776_000, help_text="Send before the file part."
    )
    file = serializers.FileField()


_LIST_PARAMETERS = [
    OpenApiParameter("limit", int, description="1 to 1000, default 20."),
    OpenApiParameter("page", str, description="Opaque cursor from a previous next_page (SDK ≥ 1.2)."),
    OpenApiParameter("after_id", str, description="Older than this file (SDK ≤ 1.1)."),
    OpenApiParameter("before_id", str, description="Newer than this file (SDK ≤ 1.1)."),
    OpenApiParameter("ids[]", str, many=True, description="At most 100 ids; one page; unknown ids left out."),
    OpenApiParameter("scope_id", str, description="Only Files scoped to this session."),
]


class FilesApiView(BetaApi):
    content_negotiation_class = IgnoreAccept
    betas = ("MANGO_FILES_BETA",)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        storage.require_configured()


class FileListCreateApi(FilesApiView):
    @extend_schema(operation_id="files_list", parameters=_LIST_PARAMETERS, responses=FileListOutputSerializer)
    def get(self, request):
        params = request.query_params
        before_id = params.get("before_id") or None
        after_id = params.get("after_id") or None
        page = params.get("page") or None
        scope_id = params.get("scope_id") or None
        ids = list(dict.fromkeys(query_list(request, "ids")))
        if before_id and after_id:
            raise InvalidRequest("before_id and after_id cannot be combined.")
        if page and (before_id or after_id):
            raise InvalidRequest("page cannot be combined with before_id or after_id.")

        if ids:
            if page or before_id or after_id or params.get("limit"):
                raise InvalidRequest("ids cannot be combined with page, limit, before_id or after_id.")
            if len(ids) > MAX_IDS:
                raise InvalidRequest(f"ids: at most {MAX_IDS} ids, got {len(ids)}.")
            malformed = [file_id for file_id in ids if not _ID_SHAPE.match(file_id)]
            if malformed:
                raise InvalidRequest(f"ids: malformed id {malformed[0][:80]!r}.")
            files = selectors.file_list_by_ids(workspace=request.user, ids=ids, scope_id=scope_id)
            return Response(_list_body(files, has_more=False, next_page=None))

        limit = query_int(request, "limit", default=20, minimum=1, maximum=1000)
        before = selectors.position_of_id(before_id, param="before_id") if before_id else None
        after = selectors.position_of_id(after_id, param="after_id") if after_id else None
        if page:
            after = selectors.cursor_decode(page)
        files, has_more = selectors.file_list(
            workspace=request.user, limit=limit, scope_id=scope_id, after=after, before=before
        )
        # `page`/`next_page` always move toward older Files; a before_id page (old SDKs only,
        # which follow before_id=first_id themselves) has no forward cursor.
        next_page = None
        if has_more and files and before is None:
            next_page = selectors.cursor_encode(selectors.Position(created_at=files[-1].created_at, id=files[-1].id))
        return Response(_list_body(files, has_more=has_more, next_page=next_page))

    @extend_schema(
        operation_id="files_upload",
        request={"multipart/form-data": FileUploadInputSerializer},
        responses=FileOutputSerializer,
    )
    def post(self, request):
        max_bytes = settings.MANGO_FILE_MAX_BYTES
        form = uploads.open_upload(request._request, max_bytes=max_bytes)
        expires_at = None
        if "expires_in_seconds" in form.fields:
            seconds = _parse_expires(form.fields["expires_in_seconds"])
            expires_at = timezone.now() + timedelta(seconds=seconds)
        mime_type = naming.resolve_mime_type(form.file_part.content_type, form.file_part.filename)
        try:
            file = services.file_upload_stream(
                workspace=request.user,
                chunks=form,
                filename=naming.clean_filename(form.file_part.filename, mime_type),
                mime_type=mime_type,
                max_bytes=max_bytes,
                expires_at=expires_at,
            )
        except RequestTooLarge:
            form.reader.discard_rest()
            raise
        metrics.FILE_UPLOAD_BYTES.inc(file.size_bytes)
        return Response(FileOutputSerializer(file).data)


def _parse_expires(raw: str) -> int:
    try:
        seconds = int(raw.strip())
    except ValueError:
        raise InvalidRequest(f"expires_in_seconds: must be an integer, got {raw[:40]!r}.")
    if not EXPIRES_MIN_SECONDS <= seconds <= EXPIRES_MAX_SECONDS:
        raise InvalidRequest(
            f"expires_in_seconds: must be between {EXPIRES_MIN_SECONDS} and {EXPIRES_MAX_SECONDS}, got {seconds}."
        )
    return seconds


def _list_body(files, *, has_more: bool, next_page: str | None) -> dict:
    data = [FileOutputSerializer(file).data for file in files]
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "next_page": next_page,
    }


class FileDetailApi(FilesApiView):
    @extend_schema(operation_id="files_retrieve_metadata", responses=FileOutputSerializer)
    def get(self, request, file_id):
        file = selectors.file_get(workspace=request.user, file_id=file_id)
        return Response(FileOutputSerializer(file).data)

    @extend_schema(operation_id="files_delete", responses={200: FileDeletedOutputSerializer})
    def delete(self, request, file_id):
        file = selectors.file_get(workspace=request.user, file_id=file_id, allow_expired=True)
        services.file_delete(file=file)
        return Response({"id": file.id, "type": "file_deleted"})


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _requested_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range of a single-range `Range` header, None to serve everything
    (no header, a multi-range or a unit we ignore), RangeNotSatisfiable when it cannot be met."""
    if not header:
        return None
    match = _RANGE.match(header.strip().replace(" ", ""))
    if not match or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})
        return max(size - suffix, 0), size - 1
    first = int(first)
    last = size - 1 if last == "" else min(int(last), size - 1)
    if first >= size or first > last:
        raise RangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})
    return first, last


def _content_disposition(filename: str) -> str:
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in filename) or "file"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def _object_response(file, *, status: int, first: int | None = None, last: int | None = None) -> StreamingHttpResponse:
    """The object's bytes as a streaming response. The open stream is also the response's
    `file_to_stream`: a server that offers wsgi.file_wrapper (config.asgi's download path,
    gunicorn) reads it in DOWNLOAD_CHUNK_BYTES pieces itself; Django closes it either way."""
    try:
        stream = storage.open_object(key=file.object_key, first=first, last=last, chunk_size=DOWNLOAD_CHUNK_BYTES)
    except storage.StorageObjectMissing:
        raise StoredObjectMissing() from None
    response = StreamingHttpResponse(stream, content_type=file.mime_type, status=status)
    response.file_to_stream = stream
    response.block_size = DOWNLOAD_CHUNK_BYTES
    return response


def _head_response(file, byte_range: tuple[int, int] | None) -> HttpResponse:
    response = HttpResponse(content_type=file.mime_type, status=200 if byte_range is None else 206)
    if byte_range is None:
        response["Content-Length"] = str(file.size_bytes)
    else:
        first, last = byte_range
        response["Content-Length"] = str(last - first + 1)
        response["Content-Range"] = f"bytes {first}-{last}/{file.size_bytes}"
    return response


class FileContentApi(FilesApiView):
    @extend_schema(
        operation_id="files_download",
        description="The bytes, with the File's mime_type as Content-Type; Range requests answer 206.",
        responses={
            (200, "*/*"): OpenApiTypes.BINARY,
            (206, "*/*"): OpenApiTypes.BINARY,
            304: OpenApiResponse(description="Not modified (If-None-Match matched the ETag)."),
            416: OpenApiResponse(description="Range not satisfiable."),
        },
    )
    def get(self, request, file_id):
        file = selectors.file_get(workspace=request.user, file_id=file_id)
        if not file.downloadable:
            raise FileNotDownloadable()
        etag = f'"{file.sha256}"'
        headers = {
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Content-Disposition": _content_disposition(file.filename),
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-cache",
        }
        if_none_match = request.META.get("HTTP_IF_NONE_MATCH", "")
        if if_none_match and (if_none_match.strip() == "*" or etag in [v.strip() for v in if_none_match.split(",")]):
            response = HttpResponse(status=304)
            response["ETag"] = etag
            return response
        if_range = request.META.get("HTTP_IF_RANGE")
        byte_range = None
        if if_range is None or if_range.strip() == etag:
            byte_range = _requested_range(request.META.get("HTTP_RANGE"), file.size_bytes)

        if file.size_bytes == 0:
            response = HttpResponse(b"", content_type=file.mime_type)
        elif request.method == "HEAD":  # the headers a GET would send; the store is not read
            response = _head_response(file, byte_range)
        elif byte_range is None:
            response = _object_response(file, status=200)
            response["Content-Length"] = str(file.size_bytes)
        else:
            first, last = byte_range
            response = _object_response(file, status=206, first=first, last=last)
            response["Content-Length"] = str(last - first + 1)
            response["Content-Range"] = f"bytes {first}-{last}/{file.size_bytes}"
        for name, value in headers.items():
            response[name] = value
        if request.method != "HEAD":
            metrics.FILE_DOWNLOAD_BYTES.inc(int(response.get("Content-Length") or 0))
        return response
