"""Environments: input serializers and the wire shape (api-contract.md §4)."""

from rest_framework import serializers

from agents.configs import environment_config_resolve
from core.api import rfc3339
from core.limits import (
    ALLOWED_HOSTS_MAX,
    DESCRIPTION_MAX_CHARS,
    ENVIRONMENT_NAME_MAX_CHARS,
    HOST_MAX_CHARS,
    PACKAGE_MAX_CHARS,
    PACKAGES_PER_MANAGER_MAX,
    Metadata,
)
from core.serializers import Array, Bool, InputSerializer, Text, TypedUnion, deleted_output, page_output, validated

SCOPES = ("organization", "account")


class UnrestrictedNetworkingSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["unrestricted"])


class LimitedNetworkingSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["limited"])
    allowed_hosts = Array(
        child=Text(max_length=HOST_MAX_CHARS), max_length=ALLOWED_HOSTS_MAX, required=False, allow_null=True
    )
    allow_mcp_servers = Bool(required=False)
    allow_package_managers = Bool(required=False)


def _package_list():
    return Array(
        child=Text(max_length=PACKAGE_MAX_CHARS), max_length=PACKAGES_PER_MANAGER_MAX, required=False, allow_null=True
    )


class PackagesSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["packages"], required=False)
    apt = _package_list()
    cargo = _package_list()
    gem = _package_list()
    go = _package_list()
    npm = _package_list()
    pip = _package_list()


class CloudConfigSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["cloud"])
    networking = TypedUnion(
        choices={"unrestricted": UnrestrictedNetworkingSerializer, "limited": LimitedNetworkingSerializer},
        required=False,
        allow_null=True,
    )
    packages = PackagesSerializer(required=False, allow_null=True)


class SelfHostedConfigSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["self_hosted"])


ENVIRONMENT_CONFIG_TYPES = {"cloud": CloudConfigSerializer, "self_hosted": SelfHostedConfigSerializer}


class _ConfigBody(InputSerializer):
    config = TypedUnion(choices=ENVIRONMENT_CONFIG_TYPES, required=False, allow_null=True)


def parse_environment_config(value) -> dict | None:
    """A validated environment config as sent (None when omitted); the service resolves it
    against the stored one (agents.configs.environment_config_resolve)."""
    return validated(_ConfigBody, {"config": value}).get("config")


class EnvironmentCreateInputSerializer(InputSerializer):
    name = Text(max_length=ENVIRONMENT_NAME_MAX_CHARS)
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    config = TypedUnion(choices=ENVIRONMENT_CONFIG_TYPES, required=False, allow_null=True)
    metadata = Metadata()
    scope = serializers.ChoiceField(choices=SCOPES, required=False, allow_null=True)


class EnvironmentUpdateInputSerializer(EnvironmentCreateInputSerializer):
    """Given fields change; `config` merges into the stored one; metadata is a patch."""

    name = Text(max_length=ENVIRONMENT_NAME_MAX_CHARS, required=False, allow_null=True)
    metadata = Metadata(allow_null_values=True)


def parse_environment_create(body) -> dict:
    data = validated(EnvironmentCreateInputSerializer, body)
    return {
        "name": data["name"],
        "description": data.get("description"),
        "config": environment_config_resolve(
            parse_environment_config(body.get("config") if isinstance(body, dict) else None)
        ),
        "metadata": data.get("metadata") or {},
        "scope": data.get("scope"),
    }


def parse_environment_changes(body) -> dict:
    """The changes of an update; `config` validated but not resolved (the service merges it into
    the stored config under the row lock)."""
    data = validated(EnvironmentUpdateInputSerializer, body)
    changes = {key: data[key] for key in ("description", "scope") if key in data}
    if data.get("name") is not None:
        changes["name"] = data["name"]
    if "config" in data:
        changes["config"] = parse_environment_config(body["config"])
    if "metadata" in data:
        changes["metadata"] = data["metadata"] or {}
    return changes


def environment_to_wire(environment) -> dict:
    return {
        "id": environment.id,
        "type": "environment",
        "name": environment.name,
        "description": environment.description,
        "config": environment.config,
        "metadata": environment.metadata,
        "scope": environment.scope,
        "created_at": rfc3339(environment.created_at),
        "updated_at": rfc3339(environment.updated_at),
        "archived_at": rfc3339(environment.archived_at),
    }


# --- response shapes (schema only: rendering is environment_to_wire) --------------------------


class EnvironmentOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["environment"])
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    config = serializers.DictField()
    metadata = serializers.DictField(child=serializers.CharField())
    scope = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


EnvironmentListOutputSerializer = page_output("EnvironmentListOutputSerializer", EnvironmentOutputSerializer)
EnvironmentDeletedOutputSerializer = deleted_output("EnvironmentDeletedOutputSerializer", type="environment_deleted")
