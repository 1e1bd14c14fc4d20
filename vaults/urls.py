"""Routes under /v1/ for vaults and their credentials."""

from django.urls import path

from vaults import apis

urlpatterns = [
    path("vaults", apis.VaultListCreateApi.as_view()),
    path("vaults/<str:vault_id>", apis.VaultDetailApi.as_view()),
    path("vaults/<str:vault_id>/archive", apis.VaultArchiveApi.as_view()),
    path("vaults/<str:vault_id>/credentials", apis.CredentialListCreateApi.as_view()),
    path("vaults/<str:vault_id>/credentials/<str:credential_id>", apis.CredentialDetailApi.as_view()),
    path("vaults/<str:vault_id>/credentials/<str:credential_id>/archive", apis.CredentialArchiveApi.as_view()),
    path(
        "vaults/<str:vault_id>/credentials/<str:credential_id>/mcp_oauth_validate",
        apis.CredentialValidateApi.as_view(),
    ),
]
