"""/v1/skills and /v1/skills/{id}/versions: create (multipart upload of one skill directory),
list, retrieve, delete, and a version's files as a zip."""

import tempfile
import zipfile

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, MemoryFileUploadHandler, TemporaryFileUploadHandler
from django.http import FileResponse
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from core.api import IgnoreAccept, Paging
from core.apiview import BetaApi
from core.bodies import content_length
from core.errors import InvalidRequest
from core.parsers import JSONParser
from skills import services as skill_services
from skills.selectors import (
    SOURCES,
    skill_file_stream,
    skill_get,
    skill_list,
    skill_version_get,
    skill_version_list,
)
from skills.serializers import (
    SkillDeletedOutputSerializer,
    SkillListOutputSerializer,
    SkillOutputSerializer,
    SkillUploadInputSerializer,
    SkillVersionDeletedOutputSerializer,
    SkillVersionListOutputSerializer,
    SkillVersionOutputSerializer,
    skill_to_wire,
    skill_version_to_wire,
)

PAGES = Paging(maximum=1000, default=20)
# Multipart framing around the files: part headers, boundaries, display_name.
_FRAMING_SLACK_BYTES = 1024 * 1024


class SkillsApi(BetaApi):
    """The skills beta header is required only in strict mode (as the other betas)."""

    betas = ("MANGO_SKILLS_BETA",)


class _Limits(FileUploadHandler):
    """First of the upload handlers: refuses an upload past the skill limits while it streams
    (before a byte more is buffered or spooled), then hands the data on unchanged."""

    def __init__(self, request=None):
        super().__init__(request)
        self.files = 0
        self.total = 0
        self.size = 0
        # Each field's files' names as sent, in order: Django's UploadedFile keeps only the
        # basename, and the path inside the skill directory is what the name means here.
        self.paths: dict[str, list[str]] = {}

    def new_file(self, field_name, file_name, *args, **kwargs):
        super().new_file(field_name, file_name, *args, **kwargs)
        self.paths.setdefault(field_name, []).append(file_name)
        self.files += 1
        self.size = 0
        if self.files > settings.MANGO_SKILL_MAX_FILES:
            raise InvalidRequest(f"files: at most {settings.MANGO_SKILL_MAX_FILES} files in a skill.")

    def receive_data_chunk(self, raw_data, start):
        self.size += len(raw_data)
        self.total += len(raw_data)
        if self.size > settings.MANGO_SKILL_FILE_MAX_BYTES:
            raise skill_services.SkillTooLarge(
                f"files: {self.file_name[:200]!r} is over {settings.MANGO_SKILL_FILE_MAX_BYTES} bytes"
                " (a skill file's limit)."
            )
        if self.total > settings.MANGO_SKILL_MAX_BYTES:
            raise skill_services.SkillTooLarge(f"files: a skill holds at most {settings.MANGO_SKILL_MAX_BYTES} bytes.")
        return raw_data

    def file_complete(self, file_size):
        return None


class _PathKeepingParser(DjangoMultiPartParser):
    """Django's multipart parser, but a part's filename is kept as sent: it is the file's path
    inside the skill directory (processors/skills.py checks every path before anything is kept)."""

    def sanitize_file_name(self, file_name):
        return file_name or None


class SkillUploadParser(BaseParser):
    media_type = "multipart/form-data"

    def parse(self, stream, media_type=None, parser_context=None):
        request = parser_context["request"]
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        declared = content_length(meta.get("CONTENT_LENGTH")) or 0
        if declared > settings.MANGO_SKILL_MAX_BYTES + _FRAMING_SLACK_BYTES:
            raise skill_services.SkillTooLarge(f"A skill upload holds at most {settings.MANGO_SKILL_MAX_BYTES} bytes.")
        limits = _Limits()
        handlers = [limits, MemoryFileUploadHandler(), TemporaryFileUploadHandler()]
        try:
            data, files = _PathKeepingParser(meta, stream, handlers, settings.DEFAULT_CHARSET).parse()
        except MultiPartParserError as exc:
            raise InvalidRequest(f"The multipart body is malformed: {exc}") from None
        for field, names in limits.paths.items():
            for part, name in zip(files.getlist(field), names, strict=True):
                part.skill_path = name
        return _Parsed(data, files)


class _Parsed:
    def __init__(self, data, files):
        self.data, self.files = data, files


def _uploaded(request) -> tuple[list[skill_services.UploadedFile], str | None]:
    parts = request.FILES.getlist("files[]") + request.FILES.getlist("files")
    files = [skill_services.UploadedFile(path=part.skill_path, body=part, size=part.size) for part in parts]
    files = skill_services.uploaded_archive_expand(files)
    display_name = request.data.get("display_name") or None
    if display_name is not None and len(display_name) > 255:
        raise InvalidRequest("display_name: at most 255 characters.")
    return files, display_name


class SkillListCreateApi(SkillsApi):
    parser_classes = [SkillUploadParser, JSONParser]

    @extend_schema(
        operation_id="skills_create",
        request={"multipart/form-data": SkillUploadInputSerializer},
        responses=SkillOutputSerializer,
    )
    def post(self, request):
        files, display_name = _uploaded(request)
        skill = skill_services.skill_create(workspace=request.user, files=files, display_name=display_name)
        return Response(skill_to_wire(skill))

    @extend_schema(
        operation_id="skills_list",
        parameters=[*PAGES.parameters(), OpenApiParameter("source", str, enum=list(SOURCES))],
        responses=SkillListOutputSerializer,
    )
    def get(self, request):
        source = request.query_params.get("source") or None
        if source is not None and source not in SOURCES:
            raise InvalidRequest(f"source: {source[:40]!r} is not one of {', '.join(SOURCES)}.")
        rows, next_page = skill_list(workspace=request.user, **PAGES.read(request), source=source)
        return Response({"data": [skill_to_wire(row) for row in rows], "next_page": next_page})


class SkillDetailApi(SkillsApi):
    @extend_schema(operation_id="skills_retrieve", responses=SkillOutputSerializer)
    def get(self, request, skill_id: str):
        return Response(skill_to_wire(skill_get(workspace=request.user, skill_id=skill_id)))

    @extend_schema(operation_id="skills_delete", responses={200: SkillDeletedOutputSerializer})
    def delete(self, request, skill_id: str):
        skill_services.skill_delete(workspace=request.user, skill_id=skill_id)
        return Response({"id": skill_id, "type": "skill_deleted"})


class SkillVersionListCreateApi(SkillsApi):
    parser_classes = [SkillUploadParser, JSONParser]

    @extend_schema(
        operation_id="skills_versions_create",
        request={"multipart/form-data": SkillUploadInputSerializer},
        responses=SkillVersionOutputSerializer,
    )
    def post(self, request, skill_id: str):
        files, _ = _uploaded(request)
        version = skill_services.skill_version_create(workspace=request.user, skill_id=skill_id, files=files)
        return Response(skill_version_to_wire(version))

    @extend_schema(
        operation_id="skills_versions_list", parameters=PAGES.parameters(), responses=SkillVersionListOutputSerializer
    )
    def get(self, request, skill_id: str):
        skill = skill_get(workspace=request.user, skill_id=skill_id)
        rows, next_page = skill_version_list(skill=skill, **PAGES.read(request))
        return Response({"data": [skill_version_to_wire(row) for row in rows], "next_page": next_page})


class SkillVersionDetailApi(SkillsApi):
    @extend_schema(operation_id="skills_versions_retrieve", responses=SkillVersionOutputSerializer)
    def get(self, request, skill_id: str, version: str):
        skill = skill_get(workspace=request.user, skill_id=skill_id)
        return Response(skill_version_to_wire(skill_version_get(skill=skill, version=version)))

    @extend_schema(operation_id="skills_versions_delete", responses={200: SkillVersionDeletedOutputSerializer})
    def delete(self, request, skill_id: str, version: str):
        deleted = skill_services.skill_version_delete(workspace=request.user, skill_id=skill_id, version=version)
        return Response({"id": deleted, "type": "skill_version_deleted"})


class SkillVersionContentApi(SkillsApi):
    content_negotiation_class = IgnoreAccept  # the SDK asks for application/binary

    @extend_schema(
        operation_id="skills_versions_download",
        description="The version's files as a zip archive, wrapped in one directory named after the skill.",
        responses={(200, "application/zip"): OpenApiTypes.BINARY},
    )
    def get(self, request, skill_id: str, version: str):
        """The version's files as a zip, wrapped in one directory named after the skill. Built
        in a spooled temporary file (memory up to 1 MiB, then disk; bounded by the skill limits)."""
        row = skill_version_get(skill=skill_get(workspace=request.user, skill_id=skill_id), version=version)
        spool = tempfile.SpooledTemporaryFile(max_size=1024 * 1024)  # noqa: SIM115 — FileResponse closes it
        with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for entry in row.files:
                with archive.open(f"{row.name}/{entry['path']}", "w") as member:
                    for chunk in skill_file_stream(version=row, entry=entry):
                        member.write(chunk)
        spool.seek(0)
        response = FileResponse(spool, content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{row.name}.zip"'
        return response
