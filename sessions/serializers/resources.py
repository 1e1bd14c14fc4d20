"""Session resources (files, repositories, memory stores): input serializers and wire shapes
(api-contract.md §6)."""

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from core.api import rfc3339
from core.errors import InvalidRequest
from core.limits import ID_MAX_CHARS
from core.serializers import (
    InputSerializer,
    Text,
    TypedUnion,
    deleted_output,
    validated,
)
from processors.memory import INSTRUCTIONS_MAX_CHARS
from processors.repositories import MAX_BRANCH_LENGTH, MAX_TOKEN_LENGTH, MAX_URL_LENGTH
from processors.resources import MAX_MOUNT_PATH_LENGTH


class ResourceParamSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["file"])
    file_id = Text(max_length=ID_MAX_CHARS)
    mount_path = Text(max_length=MAX_MOUNT_PATH_LENGTH, required=False, allow_null=True)

    def to_internal_value(self, data):
        super().to_internal_value(data)
        return data


class MemoryStoreResourceParamSerializer(InputSerializer):
    """`{type: memory_store, memory_store_id, access?, instructions?}`; `mount_path` is output-only
    (derived from the store's name), so a client's is refused rather than ignored."""

    type = serializers.ChoiceField(choices=["memory_store"])
    memory_store_id = Text(max_length=ID_MAX_CHARS)
    access = serializers.ChoiceField(choices=["read_write", "read_only"], required=False, allow_null=True)
    instructions = Text(max_length=INSTRUCTIONS_MAX_CHARS, required=False, allow_null=True, allow_blank=True)

    def validate(self, attrs):
        if "mount_path" in self.initial_data:
            raise serializers.ValidationError({"mount_path": "is output-only for memory_store resources."})
        return attrs


class BranchCheckoutSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["branch"])
    name = Text(max_length=MAX_BRANCH_LENGTH)


class CommitCheckoutSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["commit"])
    sha = Text(max_length=64)


class RepositoryResourceParamSerializer(InputSerializer):
    """`{type: github_repository, url, authorization_token?, checkout?, mount_path?}`: any git
    smart-HTTP host. The service checks the URL against the outbound guard, the checkout and the
    mount path, and encrypts the token (which no response ever carries)."""

    type = serializers.ChoiceField(choices=["github_repository"])
    url = Text(max_length=MAX_URL_LENGTH)
    authorization_token = Text(max_length=MAX_TOKEN_LENGTH, required=False, allow_null=True)
    checkout = TypedUnion(
        choices={"branch": BranchCheckoutSerializer, "commit": CommitCheckoutSerializer},
        required=False,
        allow_null=True,
    )
    mount_path = Text(max_length=MAX_MOUNT_PATH_LENGTH, required=False, allow_null=True)


class ResourceUpdateInputSerializer(InputSerializer):
    authorization_token = Text(max_length=MAX_TOKEN_LENGTH)


SESSION_RESOURCE_TYPES = {
    "file": ResourceParamSerializer,
    "github_repository": RepositoryResourceParamSerializer,
    "memory_store": MemoryStoreResourceParamSerializer,
}


# What resources.add takes (memory stores are attached at create only).
ADDABLE_RESOURCE_TYPES = {"file": ResourceParamSerializer, "github_repository": RepositoryResourceParamSerializer}


def parse_resource_add(body) -> dict:
    """resources.add's body: a file or github_repository resource param (memory stores are
    attached at create only)."""
    kind = body.get("type") if isinstance(body, dict) else None
    serializer = ADDABLE_RESOURCE_TYPES.get(kind) if isinstance(kind, str) else None
    if serializer is None:
        raise InvalidRequest(f"type: must be one of {', '.join(ADDABLE_RESOURCE_TYPES)}.")
    data = validated(serializer, body)
    return repository_resource_params(data) | {"type": kind} if kind == "github_repository" else data


def repository_resource_params(item) -> dict:
    checkout = item.get("checkout")
    return {
        "url": item["url"],
        "authorization_token": item.get("authorization_token") or None,
        "checkout": dict(checkout) if checkout is not None else None,
        "mount_path": item.get("mount_path"),
    }


def resource_to_wire(resource) -> dict:
    if resource.type == "github_repository":
        return {
            "id": resource.id,
            "type": "github_repository",
            "url": resource.url,
            "mount_path": resource.mount_path,
            "checkout": resource.checkout,
            "created_at": rfc3339(resource.created_at),
            "updated_at": rfc3339(resource.updated_at),
        }
    return {
        "id": resource.id,
        "type": "file",
        "file_id": resource.file_id,
        "mount_path": resource.mount_path,
        "created_at": rfc3339(resource.created_at),
        "updated_at": rfc3339(resource.updated_at),
    }


def memory_store_resource_to_wire(attachment) -> dict:
    """BetaManagedAgentsMemoryStoreResource: the store's name and description as attached."""
    return {
        "type": "memory_store",
        "memory_store_id": attachment.memory_store_id,
        "access": attachment.access,
        "name": attachment.name,
        "description": attachment.description,
        "instructions": attachment.instructions,
        "mount_path": attachment.mount_path,
    }


# --- response shapes (schema only: rendering is resource_to_wire) --------------------------------


ResourceDeletedOutputSerializer = deleted_output("ResourceDeletedOutputSerializer", type="session_resource_deleted")


class ResourceOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["file"])
    file_id = serializers.CharField()
    mount_path = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class CheckoutOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["branch", "commit"])
    name = serializers.CharField(required=False)
    sha = serializers.CharField(required=False)


class RepositoryResourceOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["github_repository"])
    url = serializers.CharField()
    mount_path = serializers.CharField()
    checkout = CheckoutOutputSerializer(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def resource_output(**kwargs):
    """One resource as resources.add / retrieve / update answer it: a file or a repository."""
    return PolymorphicProxySerializer(
        component_name="FileOrRepositoryResource",
        serializers=[ResourceOutputSerializer, RepositoryResourceOutputSerializer],
        resource_type_field_name="type",
        **kwargs,
    )


class MemoryStoreResourceOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["memory_store"])
    memory_store_id = serializers.CharField()
    access = serializers.ChoiceField(choices=["read_write", "read_only"])
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    instructions = serializers.CharField(allow_null=True, allow_blank=True)
    mount_path = serializers.CharField()


def session_resources_output(**kwargs):
    """A session's resources: file resources, then memory stores (the SDK's
    BetaManagedAgentsSessionResource union)."""
    return PolymorphicProxySerializer(
        component_name="SessionResourceOutput",
        serializers=[ResourceOutputSerializer, RepositoryResourceOutputSerializer, MemoryStoreResourceOutputSerializer],
        resource_type_field_name="type",
        **kwargs,
    )


class ResourceListOutputSerializer(serializers.Serializer):
    data = session_resources_output(many=True)
    next_page = serializers.CharField(allow_null=True)
