from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.models import API_KEY_PREFIX, ApiKey, Workspace, hash_api_key


def api_key_issue(*, workspace: Workspace, name: str = "", expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """Mint a key for `workspace`. Returns the row and the raw key, which is never stored and
    cannot be recovered: the row holds only its SHA-256 (a constraint forbids anything else)."""
    raw_key = ApiKey.generate_raw_key()
    api_key = ApiKey.objects.create(
        workspace=workspace,
        name=name,
        key_hash=hash_api_key(raw_key),
        key_hint=raw_key[: len(API_KEY_PREFIX) + 6],
        expires_at=expires_at,
    )
    return api_key, raw_key


@transaction.atomic
def api_key_create(*, workspace_name: str, name: str = "", expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """Create a key (and its workspace if it does not exist). Returns the row and the raw key."""
    workspace, _ = Workspace.objects.get_or_create(name=workspace_name)
    return api_key_issue(workspace=workspace, name=name, expires_at=expires_at)


def api_key_revoke(*, api_keys) -> int:
    """Revoke the given keys that are not revoked yet (idempotent); returns how many changed."""
    return api_keys.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
