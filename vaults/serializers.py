"""Vaults and credentials: input serializers and wire shapes (the SDK's BetaManagedAgentsVault,
BetaManagedAgentsCredential, BetaManagedAgentsCredentialValidation and the deleted forms).
A credential's wire shape is built from its public `auth` only: no secret is ever rendered."""

from datetime import datetime

from rest_framework import serializers

from core.api import rfc3339
from core.limits import Metadata
from core.serializers import Array, Bool, InputSerializer, Text, TypedUnion, deleted_output, validated

NAME_MAX_CHARS = 255
URL_MAX_CHARS = 2048
SECRET_MAX_CHARS = 8192
OAUTH_FIELD_MAX_CHARS = 1024
ALLOWED_HOSTS_MAX = 16
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class TokenEndpointAuthNoneInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["none"])


class TokenEndpointAuthBasicInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["client_secret_basic"])
    client_secret = Text(max_length=SECRET_MAX_CHARS)


class TokenEndpointAuthPostInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["client_secret_post"])
    client_secret = Text(max_length=SECRET_MAX_CHARS)


class TokenEndpointAuthBasicUpdateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["client_secret_basic"])
    client_secret = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)


class TokenEndpointAuthPostUpdateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["client_secret_post"])
    client_secret = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)


class OAuthRefreshInputSerializer(InputSerializer):
    client_id = Text(max_length=OAUTH_FIELD_MAX_CHARS)
    refresh_token = Text(max_length=SECRET_MAX_CHARS)
    token_endpoint = Text(max_length=URL_MAX_CHARS)
    token_endpoint_auth = TypedUnion(
        choices={
            "none": TokenEndpointAuthNoneInputSerializer,
            "client_secret_basic": TokenEndpointAuthBasicInputSerializer,
            "client_secret_post": TokenEndpointAuthPostInputSerializer,
        }
    )
    resource = Text(max_length=URL_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    scope = Text(max_length=OAUTH_FIELD_MAX_CHARS, required=False, allow_null=True, allow_blank=True)


class OAuthRefreshUpdateInputSerializer(InputSerializer):
    refresh_token = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)
    scope = Text(max_length=OAUTH_FIELD_MAX_CHARS, required=False, allow_null=True, allow_blank=True)
    token_endpoint_auth = TypedUnion(
        choices={
            "none": TokenEndpointAuthNoneInputSerializer,
            "client_secret_basic": TokenEndpointAuthBasicUpdateInputSerializer,
            "client_secret_post": TokenEndpointAuthPostUpdateInputSerializer,
        },
        required=False,
    )


class StaticBearerCreateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["static_bearer"])
    token = Text(max_length=SECRET_MAX_CHARS)
    mcp_server_url = Text(max_length=URL_MAX_CHARS)


class McpOAuthCreateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["mcp_oauth"])
    access_token = Text(max_length=SECRET_MAX_CHARS)
    mcp_server_url = Text(max_length=URL_MAX_CHARS)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    refresh = OAuthRefreshInputSerializer(required=False, allow_null=True)


class NetworkingInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["unrestricted", "limited"])
    allowed_hosts = Array(child=Text(max_length=253), max_length=ALLOWED_HOSTS_MAX, required=False)


class InjectionLocationInputSerializer(InputSerializer):
    body = Bool(required=False)
    header = Bool(required=False)


class EnvironmentVariableCreateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["environment_variable"])
    secret_name = serializers.RegexField(SECRET_NAME_PATTERN, max_length=NAME_MAX_CHARS)
    secret_value = Text(max_length=SECRET_MAX_CHARS)
    networking = NetworkingInputSerializer()
    injection_location = InjectionLocationInputSerializer(required=False)


class StaticBearerUpdateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["static_bearer"])
    token = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)


class McpOAuthUpdateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["mcp_oauth"])
    access_token = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    refresh = OAuthRefreshUpdateInputSerializer(required=False, allow_null=True)


class EnvironmentVariableUpdateInputSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["environment_variable"])
    secret_value = Text(max_length=SECRET_MAX_CHARS, required=False, allow_null=True)
    networking = NetworkingInputSerializer(required=False, allow_null=True)
    injection_location = InjectionLocationInputSerializer(required=False)


class VaultCreateInputSerializer(InputSerializer):
    display_name = Text(max_length=NAME_MAX_CHARS)
    metadata = Metadata()


class VaultUpdateInputSerializer(InputSerializer):
    display_name = Text(max_length=NAME_MAX_CHARS, required=False, allow_null=True)
    metadata = Metadata(allow_null_values=True)


class CredentialCreateInputSerializer(InputSerializer):
    auth = TypedUnion(
        choices={
            "static_bearer": StaticBearerCreateInputSerializer,
            "mcp_oauth": McpOAuthCreateInputSerializer,
            "environment_variable": EnvironmentVariableCreateInputSerializer,
        }
    )
    display_name = Text(max_length=NAME_MAX_CHARS, required=False, allow_null=True)
    metadata = Metadata()


class CredentialUpdateInputSerializer(InputSerializer):
    auth = TypedUnion(
        choices={
            "static_bearer": StaticBearerUpdateInputSerializer,
            "mcp_oauth": McpOAuthUpdateInputSerializer,
            "environment_variable": EnvironmentVariableUpdateInputSerializer,
        },
        required=False,
    )
    display_name = Text(max_length=NAME_MAX_CHARS, required=False, allow_null=True)
    metadata = Metadata(allow_null_values=True)


def parse_vault_create(body) -> dict:
    data = validated(VaultCreateInputSerializer, body)
    return {"display_name": data["display_name"], "metadata": data.get("metadata") or {}}


def parse_vault_changes(body) -> dict:
    data = validated(VaultUpdateInputSerializer, body)
    return {key: data[key] for key in ("display_name", "metadata") if data.get(key) is not None}


def parse_credential_create(body) -> dict:
    data = validated(CredentialCreateInputSerializer, body)
    return {
        "auth": dict(data["auth"]),
        "display_name": data.get("display_name"),
        "metadata": data.get("metadata") or {},
    }


def parse_credential_changes(body) -> dict:
    data = validated(CredentialUpdateInputSerializer, body)
    changes = {key: data[key] for key in ("display_name", "metadata") if data.get(key) is not None}
    if data.get("auth") is not None:
        changes["auth"] = dict(data["auth"])
    return changes


# --- wire shapes -----------------------------------------------------------------------------


def vault_to_wire(vault) -> dict:
    return {
        "id": vault.id,
        "type": "vault",
        "display_name": vault.display_name,
        "metadata": vault.metadata,
        "created_at": rfc3339(vault.created_at),
        "updated_at": rfc3339(vault.updated_at),
        "archived_at": rfc3339(vault.archived_at),
    }


def _auth_to_wire(auth: dict) -> dict:
    """The public auth, field by field (a stored key that is not listed here is never rendered)."""
    if auth["type"] == "static_bearer":
        return {"type": "static_bearer", "mcp_server_url": auth["mcp_server_url"]}
    if auth["type"] == "environment_variable":
        networking = auth["networking"]
        return {
            "type": "environment_variable",
            "secret_name": auth["secret_name"],
            "networking": {"type": "unrestricted"}
            if networking["type"] == "unrestricted"
            else {"type": "limited", "allowed_hosts": list(networking["allowed_hosts"])},
            "injection_location": {
                "header": auth["injection_location"]["header"],
                "body": auth["injection_location"]["body"],
            },
        }
    refresh = auth.get("refresh")
    return {
        "type": "mcp_oauth",
        "mcp_server_url": auth["mcp_server_url"],
        "expires_at": _iso_to_wire(auth.get("expires_at")),
        "refresh": None
        if refresh is None
        else {
            "client_id": refresh["client_id"],
            "token_endpoint": refresh["token_endpoint"],
            "token_endpoint_auth": {"type": refresh["token_endpoint_auth"]["type"]},
            "resource": refresh.get("resource"),
            "scope": refresh.get("scope"),
        },
    }


def _iso_to_wire(value: str | None) -> str | None:
    return rfc3339(datetime.fromisoformat(value)) if value else None


def credential_to_wire(credential) -> dict:
    return {
        "id": credential.id,
        "type": "vault_credential",
        "vault_id": credential.vault_id,
        "display_name": credential.display_name,
        "metadata": credential.metadata,
        "auth": _auth_to_wire(credential.auth),
        "created_at": rfc3339(credential.created_at),
        "updated_at": rfc3339(credential.updated_at),
        "archived_at": rfc3339(credential.archived_at),
    }


def validation_to_wire(result: dict, *, validated_at) -> dict:
    return {"type": "vault_credential_validation", **result, "validated_at": rfc3339(validated_at)}


# --- response shapes (schema only) -----------------------------------------------------------


class VaultOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["vault"])
    display_name = serializers.CharField()
    metadata = serializers.DictField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


class TokenEndpointAuthOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["none", "client_secret_basic", "client_secret_post"])


class OAuthRefreshOutputSerializer(serializers.Serializer):
    client_id = serializers.CharField()
    token_endpoint = serializers.CharField()
    token_endpoint_auth = TokenEndpointAuthOutputSerializer()
    resource = serializers.CharField(allow_null=True)
    scope = serializers.CharField(allow_null=True)


class CredentialAuthOutputSerializer(serializers.Serializer):
    """static_bearer: type and mcp_server_url; mcp_oauth adds expires_at and refresh;
    environment_variable: secret_name, networking and injection_location."""

    type = serializers.ChoiceField(choices=["static_bearer", "mcp_oauth", "environment_variable"])
    mcp_server_url = serializers.CharField(required=False)
    secret_name = serializers.CharField(required=False)
    networking = serializers.DictField(required=False)
    injection_location = serializers.DictField(child=serializers.BooleanField(), required=False)
    expires_at = serializers.DateTimeField(allow_null=True, required=False)
    refresh = OAuthRefreshOutputSerializer(allow_null=True, required=False)


class CredentialOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["vault_credential"])
    vault_id = serializers.CharField()
    display_name = serializers.CharField(allow_null=True)
    metadata = serializers.DictField(child=serializers.CharField())
    auth = CredentialAuthOutputSerializer()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


class HttpResponseOutputSerializer(serializers.Serializer):
    status_code = serializers.IntegerField()
    content_type = serializers.CharField(allow_blank=True)
    body = serializers.CharField(allow_blank=True)
    body_truncated = serializers.BooleanField()


class McpProbeOutputSerializer(serializers.Serializer):
    method = serializers.CharField()
    http_response = HttpResponseOutputSerializer(allow_null=True)


class RefreshOutputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["succeeded", "failed", "connect_error", "no_refresh_token"])
    http_response = HttpResponseOutputSerializer(allow_null=True)


class CredentialValidationOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["vault_credential_validation"])
    credential_id = serializers.CharField()
    vault_id = serializers.CharField()
    has_refresh_token = serializers.BooleanField()
    mcp_probe = McpProbeOutputSerializer(allow_null=True)
    refresh = RefreshOutputSerializer(allow_null=True)
    status = serializers.ChoiceField(choices=["valid", "invalid", "unknown"])
    validated_at = serializers.DateTimeField()


class VaultListOutputSerializer(serializers.Serializer):
    data = VaultOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)


class CredentialListOutputSerializer(serializers.Serializer):
    data = CredentialOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)


VaultDeletedOutputSerializer = deleted_output("VaultDeletedOutputSerializer", type="vault_deleted")
CredentialDeletedOutputSerializer = deleted_output("CredentialDeletedOutputSerializer", type="vault_credential_deleted")
