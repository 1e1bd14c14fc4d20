"""Vaults and their credentials, read-only but for revoke; a secret is never a field here."""

from django.contrib import admin

from core.adminkit import ReadOnlyInline, ReadOnlyModelAdmin
from vaults.models import Vault, VaultCredential
from vaults.services import credential_revoke


class VaultCredentialInline(ReadOnlyInline):
    """Names, types, server URLs and last use; never a secret (the `secret` column is not shown)."""

    model = VaultCredential
    fields = ("id", "display_name", "auth_type", "mcp_server_url", "last_used_at", "archived_at")
    readonly_fields = fields


@admin.register(Vault)
class VaultAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "display_name", "workspace", "created_at", "archived_at")
    list_filter = ("workspace",)
    search_fields = ("id", "display_name")
    readonly_fields = ("id", "workspace", "display_name", "metadata", "created_at", "updated_at", "archived_at")
    inlines = [VaultCredentialInline]


@admin.register(VaultCredential)
class VaultCredentialAdmin(ReadOnlyModelAdmin):
    """Credentials per workspace, with revoke (archive and erase the stored secret). The secret
    is never a field here: not in the list, the form, nor the search."""

    list_display = (
        "id",
        "display_name",
        "auth_type",
        "mcp_server_url",
        "vault",
        "workspace",
        "last_used_at",
        "archived_at",
    )
    list_filter = ("workspace", "auth_type")
    search_fields = ("id", "display_name", "mcp_server_url")
    fields = (
        "id",
        "vault",
        "workspace",
        "display_name",
        "auth_type",
        "mcp_server_url",
        "metadata",
        "last_used_at",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = fields
    actions = ["revoke"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("secret")

    @admin.action(description="Revoke (archive and erase the secret)")
    def revoke(self, request, queryset):
        for credential in queryset.filter(archived_at__isnull=True):
            credential_revoke(credential=credential)
        self.message_user(request, "Revoked.")
