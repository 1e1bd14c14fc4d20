"""Vaults: a workspace's named sets of credentials (secrets encrypted at rest, never rendered).
Tables keep their agent_sessions_* names (a state-only move).
"""

from django.db import models
from django.db.models import Q

from core.ids import new_id
from core.models import Archivable, Workspace


def _vault_id() -> str:
    return new_id("vlt")


def _credential_id() -> str:
    return new_id("vcrd")


class Vault(Archivable, models.Model):
    """A workspace's named set of credentials that sessions reference by id (`vault_ids`)."""

    id = models.CharField(primary_key=True, max_length=64, default=_vault_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="vaults")
    display_name = models.CharField(max_length=255)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agent_sessions_vault"
        indexes = [models.Index(fields=["workspace", "-id"], name="vault_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.id})"


class VaultCredential(Archivable, models.Model):
    """One credential of a vault. `auth` holds what may be shown (type, server URL, expiry, the
    refresh settings without their secrets); `secret` is a Fernet token (core/secrets.py) of the
    JSON of the secret parts (token, access and refresh tokens, client secret): never rendered,
    decrypted only by the worker right before use. An archived (revoked) credential is never
    used again. At most one live credential per server URL in a vault: matching is by URL."""

    class AuthType(models.TextChoices):
        STATIC_BEARER = "static_bearer"
        MCP_OAUTH = "mcp_oauth"
        # Substituted into the sandbox's outbound requests by its egress proxy (docs/sandboxes.md);
        # no server URL (""); one live credential per secret_name in a vault (the service checks).
        ENVIRONMENT_VARIABLE = "environment_variable"

    id = models.CharField(primary_key=True, max_length=64, default=_credential_id, editable=False)
    vault = models.ForeignKey(Vault, on_delete=models.CASCADE, related_name="credentials")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="vault_credentials")
    display_name = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 — null and "" differ
    metadata = models.JSONField(default=dict)
    auth_type = models.CharField(max_length=32, choices=AuthType.choices)
    mcp_server_url = models.CharField(max_length=2048)
    auth = models.JSONField(default=dict)
    secret = models.TextField()
    # When the worker last sent it to a server (admin: last use).
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agent_sessions_vaultcredential"
        constraints = [
            models.UniqueConstraint(
                fields=["vault", "mcp_server_url"],
                condition=Q(archived_at__isnull=True) & ~Q(auth_type="environment_variable"),
                name="vault_credential_live_url_unique",
            )
        ]
        indexes = [models.Index(fields=["vault", "-id"], name="vault_credential_id_desc")]

    def __str__(self) -> str:
        return f"{self.display_name or self.auth_type} ({self.id})"
