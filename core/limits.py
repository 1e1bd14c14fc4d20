"""Limits on every client-chosen field (docs/configuration.md "Field limits") and the metadata field.

A value over a limit is a 400 before anything is stored. Where the SDK's types state a limit
(metadata: 16 pairs, keys ≤ 64, values ≤ 512 characters; 256 tools; 20 MCP servers; 50 initial
events; rubrics ≤ 262,144 characters) it is that limit.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.errors import InvalidRequest
from core.metadata import METADATA_MAX_PAIRS

NAME_MAX_CHARS = 256
ENVIRONMENT_NAME_MAX_CHARS = 255  # the column's length
DESCRIPTION_MAX_CHARS = 2048
TITLE_MAX_CHARS = 512
SYSTEM_MAX_CHARS = 262_144
MODEL_ID_MAX_CHARS = 256
ID_MAX_CHARS = 128
URL_MAX_CHARS = 2048
HOST_MAX_CHARS = 253
ALLOWED_HOSTS_MAX = 256
PACKAGES_PER_MANAGER_MAX = 128
PACKAGE_MAX_CHARS = 256
TOOLS_MAX = 256
TOOL_DESCRIPTION_MAX_CHARS = 10_000
TOOL_SCHEMA_MAX_BYTES = 64 * 1024
TOOL_SCHEMA_MAX_DEPTH = 32
TOOL_OPTION_MAX_BYTES = 16 * 1024
MCP_SERVERS_MAX = 20
SKILLS_MAX = 64
# An agent's whole stored configuration (system prompt, tools, ...) as JSON: every session
# snapshots it, so it bounds what a session row, and a page of sessions, holds.
AGENT_CONFIG_MAX_BYTES = 1024 * 1024
EVENT_TEXT_MAX_CHARS = 262_144
EVENT_BLOCKS_MAX = 100
EVENT_SOURCE_MAX_BYTES = 8 * 1024 * 1024
EVENT_BLOCK_MAX_DEPTH = 16
EVENTS_PER_REQUEST_MAX = 100
INITIAL_EVENTS_MAX = 50
RUBRIC_MAX_CHARS = 262_144
METADATA_KEY_MAX_CHARS = 64
METADATA_VALUE_MAX_CHARS = 512


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": METADATA_MAX_PAIRS,
        "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_MAX_CHARS, "nullable": True},
    }
)
class Metadata(serializers.Field):
    """At most 16 pairs, keys 1-64 characters, values strings of at most 512. With
    `allow_null_values` (a patch), a null value means "delete this key"."""

    def __init__(self, *, allow_null_values: bool = False, **kwargs):
        self.allow_null_values = allow_null_values
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, value):
        field = self.field_name or "metadata"
        if not isinstance(value, dict):
            raise InvalidRequest(f"{field}: must be an object of strings.", code="invalid_metadata")
        if len(value) > METADATA_MAX_PAIRS:
            raise InvalidRequest(f"{field}: at most {METADATA_MAX_PAIRS} keys.", code="invalid_metadata")
        for key, item in value.items():
            if not key or len(key) > METADATA_KEY_MAX_CHARS:
                raise InvalidRequest(
                    f"{field}: keys must be 1-{METADATA_KEY_MAX_CHARS} characters.", code="invalid_metadata"
                )
            if item is None and self.allow_null_values:
                continue
            if not isinstance(item, str) or len(item) > METADATA_VALUE_MAX_CHARS:
                raise InvalidRequest(
                    f"{field}.{key[:64]}: values must be strings of at most {METADATA_VALUE_MAX_CHARS} characters.",
                    code="invalid_metadata",
                )
        return dict(value)

    def to_representation(self, value):
        return value


class PassThrough(serializers.Serializer):
    """An object checked by its declared fields but stored as sent (content blocks keep keys
    such as `cache_control` or `citations` that this server does not interpret)."""

    def to_internal_value(self, data):
        super().to_internal_value(data)
        return data


def workspace_rows_cap(*, workspace, rows, limit: int, what: str, setting: str, error=InvalidRequest) -> None:
    """Refuse one more of `rows` (the workspace's, as a queryset) once it holds `limit`. Call inside
    the creating transaction: the workspace's row lock serialises creates, so concurrent ones
    cannot race past the count."""
    type(workspace).objects.select_for_update().filter(pk=workspace.pk).first()
    if rows.count() >= limit:
        raise error(f"The workspace holds its limit of {limit} {what} ({setting}).")
