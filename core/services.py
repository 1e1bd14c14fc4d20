from django.db import transaction

from core.models import ApiKey, Workspace, hash_api_key


@transaction.atomic
def api_key_create(*, workspace_name: str, name: str = "") -> tuple[ApiKey, str]:
    """Create a key (and its workspace if it does not exist). Returns the row and the raw key,
    which is never stored and cannot be recovered."""
    workspace, _ = Workspace.objects.get_or_create(name=workspace_name)
    raw_key = ApiKey.generate_raw_key()
    api_key = ApiKey.objects.create(
        workspace=workspace,
        name=name,
        key_hash=hash_api_key(raw_key),
        key_hint=raw_key[: len("sk-mango-") + 6],
    )
    return api_key, raw_key
