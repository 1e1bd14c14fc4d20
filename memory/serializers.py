"""Memory stores, memories and memory versions: input serializers and wire shapes (the SDK's
BetaManagedAgentsMemoryStore, BetaManagedAgentsMemory, BetaManagedAgentsMemoryPrefix,
BetaManagedAgentsMemoryVersion and their deleted forms)."""

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from core.api import rfc3339
from core.limits import Metadata
from core.serializers import InputSerializer, Text, deleted_output, validated
from processors.memory import CONTENT_MAX_BYTES, PATH_MAX_BYTES, STORE_DESCRIPTION_MAX_CHARS, STORE_NAME_MAX_CHARS

VIEWS = ("basic", "full")
OPERATIONS = ("created", "modified", "deleted")
SHA256_CHARS = 64


class MemoryStoreCreateInputSerializer(InputSerializer):
    name = Text(max_length=STORE_NAME_MAX_CHARS)
    description = Text(max_length=STORE_DESCRIPTION_MAX_CHARS, required=False, allow_blank=True)
    metadata = Metadata()


class MemoryStoreUpdateInputSerializer(InputSerializer):
    """Given fields change; metadata is a patch (a null value removes its key)."""

    name = Text(max_length=STORE_NAME_MAX_CHARS, required=False, allow_null=True)
    description = Text(max_length=STORE_DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    metadata = Metadata(allow_null_values=True)


class MemoryCreateInputSerializer(InputSerializer):
    path = Text(max_length=PATH_MAX_BYTES)
    # Characters; the byte limit (102,400 bytes of UTF-8) is checked by processors.memory.
    content = Text(max_length=CONTENT_MAX_BYTES, allow_blank=True)


class PreconditionInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["content_sha256"])
    content_sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", max_length=SHA256_CHARS)


class MemoryUpdateInputSerializer(InputSerializer):
    path = Text(max_length=PATH_MAX_BYTES, required=False, allow_null=True)
    content = Text(max_length=CONTENT_MAX_BYTES, required=False, allow_null=True, allow_blank=True)
    precondition = PreconditionInputSerializer(required=False, allow_null=True)


def parse_memory_store_create(body) -> dict:
    data = validated(MemoryStoreCreateInputSerializer, body)
    return {"name": data["name"], "description": data.get("description") or "", "metadata": data.get("metadata") or {}}


def parse_memory_store_changes(body) -> dict:
    data = validated(MemoryStoreUpdateInputSerializer, body)
    return {key: data[key] for key in ("name", "description", "metadata") if data.get(key) is not None}


def parse_memory_create(body) -> dict:
    data = validated(MemoryCreateInputSerializer, body)
    return {"path": data["path"], "content": data["content"]}


def parse_memory_update(body) -> dict:
    data = validated(MemoryUpdateInputSerializer, body)
    precondition = data.get("precondition")
    return {
        "path": data.get("path"),
        "content": data.get("content"),
        "expected_sha256": precondition["content_sha256"] if precondition else None,
    }


# --- wire shapes -----------------------------------------------------------------------------


def memory_store_to_wire(store) -> dict:
    return {
        "id": store.id,
        "type": "memory_store",
        "name": store.name,
        "description": store.description,
        "metadata": store.metadata,
        "created_at": rfc3339(store.created_at),
        "updated_at": rfc3339(store.updated_at),
        "archived_at": rfc3339(store.archived_at),
    }


def memory_to_wire(memory, *, view: str) -> dict:
    return {
        "id": memory.id,
        "type": "memory",
        "memory_store_id": memory.store_id,
        "path": memory.path,
        "content": memory.content if view == "full" else None,
        "content_sha256": memory.content_sha256,
        "content_size_bytes": memory.content_size_bytes,
        "memory_version_id": memory.version_id,
        "created_at": rfc3339(memory.created_at),
        "updated_at": rfc3339(memory.updated_at),
    }


def memory_prefix_to_wire(path: str) -> dict:
    return {"type": "memory_prefix", "path": path}


def memory_version_to_wire(version, *, view: str) -> dict:
    return {
        "id": version.id,
        "type": "memory_version",
        "memory_store_id": version.store_id,
        "memory_id": version.memory_id,
        "operation": version.operation,
        "path": version.path,
        "content": version.content if view == "full" else None,
        "content_sha256": version.content_sha256,
        "content_size_bytes": version.content_size_bytes,
        "created_by": version.created_by,
        "created_at": rfc3339(version.created_at),
        "redacted_at": rfc3339(version.redacted_at),
        "redacted_by": version.redacted_by,
    }


# --- response shapes (schema only: rendering is the *_to_wire functions above) --------------


class MemoryStoreOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory_store"])
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    metadata = serializers.DictField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


class MemoryOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory"])
    memory_store_id = serializers.CharField()
    path = serializers.CharField()
    content = serializers.CharField(allow_null=True, allow_blank=True)
    content_sha256 = serializers.CharField()
    content_size_bytes = serializers.IntegerField()
    memory_version_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class MemoryPrefixOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["memory_prefix"])
    path = serializers.CharField()


ACTOR_SCHEMA = {
    "oneOf": [
        {
            "type": "object",
            "required": ["type", "api_key_id"],
            "properties": {"type": {"type": "string", "enum": ["api_actor"]}, "api_key_id": {"type": "string"}},
        },
        {
            "type": "object",
            "required": ["type", "session_id"],
            "properties": {"type": {"type": "string", "enum": ["session_actor"]}, "session_id": {"type": "string"}},
        },
    ],
}


@extend_schema_field(ACTOR_SCHEMA)
class ActorField(serializers.DictField):
    pass


class MemoryVersionOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory_version"])
    memory_store_id = serializers.CharField()
    memory_id = serializers.CharField()
    operation = serializers.ChoiceField(choices=OPERATIONS)
    path = serializers.CharField(allow_null=True)
    content = serializers.CharField(allow_null=True, allow_blank=True)
    content_sha256 = serializers.CharField(allow_null=True)
    content_size_bytes = serializers.IntegerField(allow_null=True)
    created_by = ActorField(allow_null=True)
    created_at = serializers.DateTimeField()
    redacted_at = serializers.DateTimeField(allow_null=True)
    redacted_by = ActorField(allow_null=True)


class MemoryStoreListOutputSerializer(serializers.Serializer):
    data = MemoryStoreOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)


class MemoryListOutputSerializer(serializers.Serializer):
    data = PolymorphicProxySerializer(
        component_name="MemoryListItem",
        serializers=[MemoryOutputSerializer, MemoryPrefixOutputSerializer],
        resource_type_field_name="type",
        many=True,
    )
    next_page = serializers.CharField(allow_null=True)


class MemoryVersionListOutputSerializer(serializers.Serializer):
    data = MemoryVersionOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)


MemoryStoreDeletedOutputSerializer = deleted_output("MemoryStoreDeletedOutputSerializer", type="memory_store_deleted")
MemoryDeletedOutputSerializer = deleted_output("MemoryDeletedOutputSerializer", type="memory_deleted")
