"""/v1/vaults and /v1/vaults/{id}/credentials: the SDK's 13 methods. No response carries a secret."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool
from core.apiview import AgentsApi
from vaults import services as vault_services
from vaults.selectors import credential_get, credential_list, vault_get, vault_list
from vaults.serializers import (
    CredentialCreateInputSerializer,
    CredentialDeletedOutputSerializer,
    CredentialListOutputSerializer,
    CredentialOutputSerializer,
    CredentialUpdateInputSerializer,
    CredentialValidationOutputSerializer,
    VaultCreateInputSerializer,
    VaultDeletedOutputSerializer,
    VaultListOutputSerializer,
    VaultOutputSerializer,
    VaultUpdateInputSerializer,
    credential_to_wire,
    parse_credential_changes,
    parse_credential_create,
    parse_vault_changes,
    parse_vault_create,
    validation_to_wire,
    vault_to_wire,
)

PAGES = Paging(maximum=100, default=20)
_ARCHIVED = OpenApiParameter("include_archived", bool)


class VaultListCreateApi(AgentsApi):
    @extend_schema(operation_id="vaults_create", request=VaultCreateInputSerializer, responses=VaultOutputSerializer)
    def post(self, request):
        vault = vault_services.vault_create(workspace=request.user, **parse_vault_create(request.data))
        return Response(vault_to_wire(vault))

    @extend_schema(
        operation_id="vaults_list", parameters=[*PAGES.parameters(), _ARCHIVED], responses=VaultListOutputSerializer
    )
    def get(self, request):
        rows, next_page = vault_list(
            workspace=request.user, **PAGES.read(request), include_archived=query_bool(request, "include_archived")
        )
        return Response({"data": [vault_to_wire(row) for row in rows], "next_page": next_page})


class VaultDetailApi(AgentsApi):
    @extend_schema(operation_id="vaults_retrieve", responses=VaultOutputSerializer)
    def get(self, request, vault_id: str):
        return Response(vault_to_wire(vault_get(workspace=request.user, vault_id=vault_id)))

    @extend_schema(operation_id="vaults_update", request=VaultUpdateInputSerializer, responses=VaultOutputSerializer)
    def post(self, request, vault_id: str):
        vault = vault_services.vault_update(
            workspace=request.user, vault_id=vault_id, changes=parse_vault_changes(request.data)
        )
        return Response(vault_to_wire(vault))

    @extend_schema(operation_id="vaults_delete", responses={200: VaultDeletedOutputSerializer})
    def delete(self, request, vault_id: str):
        vault_services.vault_delete(workspace=request.user, vault_id=vault_id)
        return Response({"id": vault_id, "type": "vault_deleted"})


class VaultArchiveApi(AgentsApi):
    @extend_schema(operation_id="vaults_archive", request=None, responses=VaultOutputSerializer)
    def post(self, request, vault_id: str):
        return Response(vault_to_wire(vault_services.vault_archive(workspace=request.user, vault_id=vault_id)))


class CredentialListCreateApi(AgentsApi):
    @extend_schema(
        operation_id="vaults_credentials_create",
        request=CredentialCreateInputSerializer,
        responses=CredentialOutputSerializer,
    )
    def post(self, request, vault_id: str):
        credential = vault_services.credential_create(
            workspace=request.user, vault_id=vault_id, **parse_credential_create(request.data)
        )
        return Response(credential_to_wire(credential))

    @extend_schema(
        operation_id="vaults_credentials_list",
        parameters=[*PAGES.parameters(), _ARCHIVED],
        responses=CredentialListOutputSerializer,
    )
    def get(self, request, vault_id: str):
        vault = vault_get(workspace=request.user, vault_id=vault_id)
        rows, next_page = credential_list(
            vault=vault, **PAGES.read(request), include_archived=query_bool(request, "include_archived")
        )
        return Response({"data": [credential_to_wire(row) for row in rows], "next_page": next_page})


class CredentialDetailApi(AgentsApi):
    @extend_schema(operation_id="vaults_credentials_retrieve", responses=CredentialOutputSerializer)
    def get(self, request, vault_id: str, credential_id: str):
        vault = vault_get(workspace=request.user, vault_id=vault_id)
        return Response(credential_to_wire(credential_get(vault=vault, credential_id=credential_id)))

    @extend_schema(
        operation_id="vaults_credentials_update",
        request=CredentialUpdateInputSerializer,
        responses=CredentialOutputSerializer,
    )
    def post(self, request, vault_id: str, credential_id: str):
        credential = vault_services.credential_update(
            workspace=request.user,
            vault_id=vault_id,
            credential_id=credential_id,
            changes=parse_credential_changes(request.data),
        )
        return Response(credential_to_wire(credential))

    @extend_schema(operation_id="vaults_credentials_delete", responses={200: CredentialDeletedOutputSerializer})
    def delete(self, request, vault_id: str, credential_id: str):
        vault_services.credential_delete(workspace=request.user, vault_id=vault_id, credential_id=credential_id)
        return Response({"id": credential_id, "type": "vault_credential_deleted"})


class CredentialArchiveApi(AgentsApi):
    @extend_schema(operation_id="vaults_credentials_archive", request=None, responses=CredentialOutputSerializer)
    def post(self, request, vault_id: str, credential_id: str):
        credential = vault_services.credential_archive(
            workspace=request.user, vault_id=vault_id, credential_id=credential_id
        )
        return Response(credential_to_wire(credential))


class CredentialValidateApi(AgentsApi):
    @extend_schema(
        operation_id="vaults_credentials_mcp_oauth_validate",
        request=None,
        responses=CredentialValidationOutputSerializer,
    )
    def post(self, request, vault_id: str, credential_id: str):
        result = vault_services.credential_validate(
            workspace=request.user, vault_id=vault_id, credential_id=credential_id
        )
        return Response(validation_to_wire(result, validated_at=timezone.now()))
