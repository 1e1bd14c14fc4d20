"""Reads of vaults and their credentials, scoped to the caller's workspace: a foreign id is the
same 404 as a missing one. Lists are newest first."""

from core.errors import NotFound
from core.lookups import one_or_not_found
from core.pagination import keyset_page, rendered_bytes
from vaults.models import Vault, VaultCredential


def vault_get(*, workspace, vault_id: str, for_update: bool = False) -> Vault:
    return one_or_not_found(
        Vault.objects.filter(workspace=workspace, id=vault_id),
        for_update=for_update,
        missing=NotFound(f"Vault {vault_id!r} not found."),
    )


def vault_list(*, workspace, limit: int, page: str | None, include_archived: bool):
    queryset = Vault.objects.filter(workspace=workspace)
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    rows, next_page, _ = keyset_page(
        queryset,
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="vaults",
        size=rendered_bytes("display_name", "metadata"),
    )
    return rows, next_page


def credential_get(*, vault: Vault, credential_id: str, for_update: bool = False) -> VaultCredential:
    return one_or_not_found(
        VaultCredential.objects.filter(vault=vault, id=credential_id),
        for_update=for_update,
        missing=NotFound(f"Credential {credential_id!r} not found."),
    )


def credential_list(*, vault: Vault, limit: int, page: str | None, include_archived: bool):
    queryset = VaultCredential.objects.filter(vault=vault).defer("secret")
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    rows, next_page, _ = keyset_page(
        queryset,
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="vault_credentials",
        size=rendered_bytes("display_name", "metadata", "auth"),
    )
    return rows, next_page


def live_vault_ids(*, workspace, vault_ids: list[str]) -> set[str]:
    """Those of `vault_ids` that are the workspace's and not archived."""
    return set(
        Vault.objects.filter(workspace=workspace, id__in=vault_ids, archived_at__isnull=True).values_list(
            "id", flat=True
        )
    )


def session_credentials(*, workspace_id: str, vault_ids: list[str]) -> dict[str, VaultCredential]:
    """{server URL: credential} for a session's vaults: live credentials of live vaults, the first
    vault in `vault_ids` winning for a URL."""
    order = {vault_id: position for position, vault_id in enumerate(vault_ids)}
    rows = VaultCredential.objects.filter(
        workspace_id=workspace_id, vault_id__in=vault_ids, archived_at__isnull=True, vault__archived_at__isnull=True
    ).exclude(auth_type=VaultCredential.AuthType.ENVIRONMENT_VARIABLE)
    found: dict[str, VaultCredential] = {}
    for row in sorted(rows, key=lambda row: (order.get(row.vault_id, len(order)), row.id)):
        found.setdefault(row.mcp_server_url, row)
    return found


def credential_by_id(*, credential_id: str) -> VaultCredential | None:
    return VaultCredential.objects.filter(id=credential_id).first()


def session_environment_credentials(*, workspace_id: str, vault_ids: list[str]) -> list[VaultCredential]:
    """The environment_variable credentials of a session's vaults (live ones of live vaults), one
    per secret_name, the first vault in `vault_ids` winning."""
    if not vault_ids:
        return []
    order = {vault_id: position for position, vault_id in enumerate(vault_ids)}
    rows = VaultCredential.objects.filter(
        workspace_id=workspace_id,
        vault_id__in=vault_ids,
        archived_at__isnull=True,
        vault__archived_at__isnull=True,
        auth_type=VaultCredential.AuthType.ENVIRONMENT_VARIABLE,
    )
    found: dict[str, VaultCredential] = {}
    for row in sorted(rows, key=lambda row: (order.get(row.vault_id, len(order)), row.id)):
        found.setdefault(row.auth["secret_name"], row)
    return list(found.values())
