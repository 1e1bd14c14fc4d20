"""Vaults and their credentials: writes, the credential's secrets at rest, token refresh.

A secret is write-only from the moment it arrives: the credential row keeps what may be shown
in `auth` (type, server URL, expiry, refresh settings) and the secret parts (bearer token,
access and refresh tokens, client secret) only as one Fernet token in `secret`
(core/secrets.py). Nothing here renders, logs or raises a secret; only ``credential_secrets``
decrypts, for the worker right before use (and the validation probe). Network calls (token
endpoint, MCP probe) run outside any transaction; the new tokens are then stored in a short one.

`environment_variable` credentials have no server URL: the worker hands their value to the
session sandbox's egress proxy, which substitutes it for a placeholder in requests to the
credential's hosts (sessions/runtime/sandbox_ready.py sandbox_networking, docs/sandboxes.md).
"""

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core import oauth, secrets
from core.errors import Conflict, InvalidRequest, ServiceUnavailable
from core.limits import workspace_rows_cap
from core.metadata import metadata_patch_apply
from core.signals import resource_change_announce
from core.updates import model_update
from vaults.auth import auth_split, future_time, injection_location, networking_public
from vaults.models import Vault, VaultCredential
from vaults.selectors import credential_by_id, credential_get, vault_get
from vaults.signals import secrets_changed

PROBE_TIMEOUT_SECONDS = 15.0


class CredentialUrlTaken(Conflict):
    code = "credential_url_taken"


def _secret_store(values: dict) -> str:
    try:
        return secrets.encrypt(json.dumps(values))
    except secrets.SecretsUnavailable as exc:
        raise ServiceUnavailable(f"Secrets cannot be stored: {exc}.") from None


def credential_secrets(credential: VaultCredential) -> dict:
    """The credential's secret parts, decrypted (worker and validation probe only)."""
    return json.loads(secrets.decrypt(credential.secret))


def _writable(vault: Vault) -> None:
    if vault.archived_at is not None:
        raise InvalidRequest(f"Vault {vault.id!r} is archived: it is read-only.")


# --- vaults ----------------------------------------------------------------------------------


def vault_create(*, workspace, display_name: str, metadata: dict) -> Vault:
    now = timezone.now()
    with transaction.atomic():
        workspace_rows_cap(
            workspace=workspace, rows=Vault.objects.filter(workspace=workspace),
            limit=settings.MANGO_WORKSPACE_MAX_VAULTS, what="vaults", setting="MANGO_WORKSPACE_MAX_VAULTS",
        )  # fmt: skip
        vault = Vault.objects.create(
            workspace=workspace, display_name=display_name, metadata=metadata, created_at=now, updated_at=now
        )
        resource_change_announce(workspace_id=vault.workspace_id, type="vault.created", object_id=vault.id)
        return vault


@transaction.atomic
def vault_update(*, workspace, vault_id: str, changes: dict) -> Vault:
    """Given fields change; metadata is a patch (null removes a key). An archived vault is read-only."""
    vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
    _writable(vault)
    data = {}
    if changes.get("display_name") is not None:
        data["display_name"] = changes["display_name"]
    if changes.get("metadata") is not None:
        data["metadata"] = metadata_patch_apply(vault.metadata, changes["metadata"])
    return model_update(instance=vault, data=data)


@transaction.atomic
def vault_archive(*, workspace, vault_id: str) -> Vault:
    """An archived vault's credentials are used by no session any more (nor by running ones:
    their sandboxes' egress proxies lose the secrets after the commit)."""
    vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
    if vault.archived_at is None:
        resource_change_announce(workspace_id=vault.workspace_id, type="vault.archived", object_id=vault.id)
    vault.archive()
    secrets_changed.send(sender=Vault, workspace_id=vault.workspace_id, vault_id=vault.id)
    return vault


@transaction.atomic
def vault_delete(*, workspace, vault_id: str) -> None:
    """The vault and every credential (their ciphertexts with them) go, from running sandboxes'
    egress proxies too."""
    vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
    secrets_changed.send(sender=Vault, workspace_id=vault.workspace_id, vault_id=vault.id)
    resource_change_announce(workspace_id=vault.workspace_id, type="vault.deleted", object_id=vault.id)
    vault.delete()


# --- credentials -----------------------------------------------------------------------------


def credential_create(
    *, workspace, vault_id: str, auth: dict, display_name: str | None, metadata: dict
) -> VaultCredential:
    """Only ciphertext of the secret parts is stored. One live credential per server URL in a vault."""
    kind, url, public, secret = auth_split(auth)
    ciphertext = _secret_store(secret)
    now = timezone.now()
    limit = settings.MANGO_VAULT_MAX_CREDENTIALS
    try:
        with transaction.atomic():
            vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
            _writable(vault)
            if VaultCredential.objects.filter(vault=vault).count() >= limit:
                raise InvalidRequest(
                    f"Vault {vault.id!r} holds its limit of {limit} credentials (MANGO_VAULT_MAX_CREDENTIALS)."
                )
            if (
                kind == VaultCredential.AuthType.ENVIRONMENT_VARIABLE
                and VaultCredential.objects.filter(
                    vault=vault, auth_type=kind, archived_at__isnull=True, auth__secret_name=public["secret_name"]
                ).exists()
            ):  # under the vault's row lock: no race
                raise CredentialUrlTaken(
                    f"Vault {vault.id!r} already holds a live credential for {public['secret_name']!r}; "
                    "archive it or update it."
                )
            credential = VaultCredential.objects.create(
                vault=vault,
                workspace=workspace,
                display_name=display_name,
                metadata=metadata,
                auth_type=kind,
                mcp_server_url=url,
                auth=public,
                secret=ciphertext,
                created_at=now,
                updated_at=now,
            )
            _credential_announce(credential, "vault_credential.created")
            return credential
    except IntegrityError:
        raise CredentialUrlTaken(
            f"Vault {vault_id!r} already holds a live credential for {url[:200]!r}; archive it or update it."
        ) from None


def credential_update(*, workspace, vault_id: str, credential_id: str, changes: dict) -> VaultCredential:
    """Given fields change; metadata is a patch. `auth` must keep the credential's type; the server
    URL, client id and token endpoint cannot change; a new secret replaces the stored one."""
    auth = changes.get("auth")
    with transaction.atomic():
        vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
        _writable(vault)
        credential = credential_get(vault=vault, credential_id=credential_id, for_update=True)
        if credential.archived_at is not None:
            raise InvalidRequest(f"Credential {credential.id!r} is archived: it is read-only.")
        data = {}
        if changes.get("display_name") is not None:
            data["display_name"] = changes["display_name"]
        if changes.get("metadata") is not None:
            data["metadata"] = metadata_patch_apply(credential.metadata, changes["metadata"])
        if auth is not None:
            if auth["type"] != credential.auth_type:
                raise InvalidRequest(
                    f"auth.type: the credential is {credential.auth_type}; its type cannot be changed."
                )
            public, secret = _auth_changes(credential, auth)
            data["auth"] = public
            data["secret"] = _secret_store(secret)
            if credential.auth_type == VaultCredential.AuthType.ENVIRONMENT_VARIABLE:
                # Running sandboxes' proxies hold the old value (or hosts): they are made again.
                secrets_changed.send(sender=Vault, workspace_id=vault.workspace_id, vault_id=vault.id)
        return model_update(instance=credential, data=data)


def _auth_changes(credential: VaultCredential, auth: dict) -> tuple[dict, dict]:
    public = dict(credential.auth)
    secret = credential_secrets(credential)
    if credential.auth_type == VaultCredential.AuthType.STATIC_BEARER:
        if auth.get("token") is not None:
            secret["token"] = auth["token"]
        return public, secret
    if credential.auth_type == VaultCredential.AuthType.ENVIRONMENT_VARIABLE:
        if auth.get("secret_value") is not None:
            secret["secret_value"] = auth["secret_value"]
        if auth.get("networking") is not None:  # replaces the stored one as a whole
            public["networking"] = networking_public("auth.networking", auth["networking"])
        location = auth.get("injection_location") or {}
        public["injection_location"] = injection_location({**public["injection_location"], **location})
        return public, secret
    if auth.get("access_token") is not None:
        secret["access_token"] = auth["access_token"]
    if "expires_at" in auth:
        public["expires_at"] = future_time("auth.expires_at", auth["expires_at"])
    refresh = auth.get("refresh")
    if refresh is not None:
        current = public.get("refresh")
        if current is None:
            raise InvalidRequest("auth.refresh: the credential has no refresh configuration to update.")
        current = dict(current)
        if refresh.get("refresh_token") is not None:
            secret["refresh_token"] = refresh["refresh_token"]
        if refresh.get("scope") is not None:
            current["scope"] = refresh["scope"] or None
        endpoint_auth = refresh.get("token_endpoint_auth")
        if endpoint_auth is not None:
            kept = current["token_endpoint_auth"]["type"]
            if endpoint_auth["type"] == "none" or kept == "none":
                if endpoint_auth["type"] != kept:
                    raise InvalidRequest(
                        f"auth.refresh.token_endpoint_auth: the credential uses {kept}; it cannot change."
                    )
            elif endpoint_auth.get("client_secret") is not None:
                secret["client_secret"] = endpoint_auth["client_secret"]
        public["refresh"] = current
    return public, secret


@transaction.atomic
def credential_archive(*, workspace, vault_id: str, credential_id: str) -> VaultCredential:
    """Archived is revoked: no session uses it again, and its secret is erased."""
    vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
    credential = credential_get(vault=vault, credential_id=credential_id, for_update=True)
    if credential.archived_at is None:
        _credential_announce(credential, "vault_credential.archived")
    credential_revoke(credential=credential)
    return credential


def _credential_announce(credential: VaultCredential, type: str) -> None:
    resource_change_announce(
        workspace_id=credential.workspace_id,
        type=type,
        object_id=credential.id,
        extra={"vault_id": credential.vault_id},
    )


def credential_revoke(*, credential: VaultCredential) -> None:
    """Archive and erase the stored secret (the admin's revoke and the API's archive); after the
    commit, running sandboxes' egress proxies lose it too."""
    if credential.archived_at is None:
        credential.archive()
    if credential.secret:
        credential.secret = ""
        credential.save(update_fields=["secret"])
    _proxies_revoke(credential)


def _proxies_revoke(credential: VaultCredential) -> None:
    if credential.auth_type == VaultCredential.AuthType.ENVIRONMENT_VARIABLE:  # the only kind proxies hold
        secrets_changed.send(sender=Vault, workspace_id=credential.workspace_id, vault_id=credential.vault_id)


@transaction.atomic
def credential_delete(*, workspace, vault_id: str, credential_id: str) -> None:
    vault = vault_get(workspace=workspace, vault_id=vault_id, for_update=True)
    credential = credential_get(vault=vault, credential_id=credential_id, for_update=True)
    _proxies_revoke(credential)
    _credential_announce(credential, "vault_credential.deleted")
    credential.delete()


# --- use (worker) ----------------------------------------------------------------------------


def credential_mark_used(*, credential_id: str) -> None:
    VaultCredential.objects.filter(id=credential_id).update(last_used_at=timezone.now())


def credential_needs_refresh(credential: VaultCredential) -> bool:
    expires_at = (credential.auth or {}).get("expires_at")
    if credential.auth_type != VaultCredential.AuthType.MCP_OAUTH or not expires_at:
        return False
    margin = timedelta(seconds=settings.MANGO_OAUTH_REFRESH_MARGIN_SECONDS)
    return datetime.fromisoformat(expires_at) - margin <= timezone.now()


def credential_refresh(*, credential_id: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> VaultCredential:
    """Exchange the refresh token for new tokens (outside any transaction), then store them.
    If another worker refreshed meanwhile (the stored secret changed), its tokens are kept.
    Raises oauth.RefreshFailed / RefreshUnreachable, or ValueError when there is no refresh token."""
    credential = credential_by_id(credential_id=credential_id)
    if credential is None or credential.archived_at is not None or not credential.secret:
        raise ValueError("the credential is gone or revoked")
    refresh = (credential.auth or {}).get("refresh")
    secret = credential_secrets(credential)
    if not refresh or not secret.get("refresh_token"):
        raise ValueError("the credential has no refresh token")
    before = credential.secret
    try:
        tokens = oauth.refresh(
            token_endpoint=refresh["token_endpoint"],
            client_id=refresh["client_id"],
            refresh_token=secret["refresh_token"],
            auth_type=refresh["token_endpoint_auth"]["type"],
            client_secret=secret.get("client_secret"),
            scope=refresh.get("scope"),
            resource=refresh.get("resource"),
            timeout=timeout,
        )
    except oauth.RefreshFailed:
        current = credential_by_id(credential_id=credential_id)
        if current is not None and current.secret and current.secret != before:
            return current
        with transaction.atomic():
            _credential_announce(credential, "vault_credential.refresh_failed")
        raise
    except oauth.RefreshUnreachable:
        with transaction.atomic():
            _credential_announce(credential, "vault_credential.refresh_failed")
        raise
    with transaction.atomic():
        row = VaultCredential.objects.select_for_update().filter(id=credential_id, archived_at__isnull=True).first()
        if row is None:
            raise ValueError("the credential is gone or revoked")
        stored = credential_secrets(row)
        stored["access_token"] = tokens.access_token
        if tokens.refresh_token:
            stored["refresh_token"] = tokens.refresh_token
        auth = dict(row.auth)
        auth["expires_at"] = tokens.expires_at.isoformat() if tokens.expires_at else None
        return model_update(instance=row, data={"auth": auth, "secret": _secret_store(stored)})


def credential_validate(*, workspace, vault_id: str, credential_id: str) -> dict:
    """Probe the MCP server with the stored access token; on a 401 (or an expired token) try a
    refresh and report it. Returns the validation's fields (rendered by the API)."""
    vault = vault_get(workspace=workspace, vault_id=vault_id)
    credential = credential_get(vault=vault, credential_id=credential_id)
    if credential.auth_type != VaultCredential.AuthType.MCP_OAUTH:
        raise InvalidRequest(f"Credential {credential.id!r} is {credential.auth_type}, not mcp_oauth.")
    result = {
        "credential_id": credential.id,
        "vault_id": vault.id,
        "has_refresh_token": False,
        "mcp_probe": None,
        "refresh": None,
        "status": "unknown",
    }
    if credential.archived_at is not None or not credential.secret:
        result["status"] = "invalid"
        return result
    secret = credential_secrets(credential)
    result["has_refresh_token"] = bool(secret.get("refresh_token") and credential.auth.get("refresh"))
    try:
        oauth.mcp_probe(
            url=credential.mcp_server_url, access_token=secret["access_token"], timeout=PROBE_TIMEOUT_SECONDS
        )
        result["status"] = "valid"
        return result
    except oauth.RefreshUnreachable:
        result["mcp_probe"] = {"method": "initialize", "http_response": None}
        return result
    except oauth.ProbeRejected as exc:
        result["mcp_probe"] = {"method": "initialize", "http_response": exc.response.to_wire()}
        if exc.response.status_code not in (401, 403):
            return result
    result["status"] = "invalid"
    if not result["has_refresh_token"]:
        result["refresh"] = {"status": "no_refresh_token", "http_response": None}
        return result
    try:
        credential_refresh(credential_id=credential.id)
    except oauth.RefreshUnreachable:
        result["refresh"] = {"status": "connect_error", "http_response": None}
        return result
    except oauth.RefreshFailed as exc:
        response = exc.response.to_wire() if exc.response else None
        result["refresh"] = {"status": "failed", "http_response": response}
        return result
    except ValueError:
        result["refresh"] = {"status": "no_refresh_token", "http_response": None}
        return result
    result["refresh"] = {"status": "succeeded", "http_response": None}
    result["status"] = "unknown"  # a refresh succeeded, the new token is not tested yet
    return result
