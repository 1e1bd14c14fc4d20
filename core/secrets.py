"""Secrets at rest (vault credentials, repository tokens): Fernet tokens (AES-128-CBC with an
HMAC-SHA256, from `cryptography`) under the keys of MANGO_VAULT_KEY.

MANGO_VAULT_KEY is a comma-separated list of Fernet keys (``generate_key``; `make run` writes
one into .env): the first encrypts, every one decrypts (MultiFernet), so a key is rotated by
putting a new one first, re-encrypting what is stored (``reencrypt``), then dropping the old one
(docs/configuration.md). Without a key nothing can be stored: SecretsUnavailable, which the
APIs answer with an error that names the setting. Plaintext never leaves this module but as the
return value of ``decrypt``, which only the worker calls, right before use.
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SecretsUnavailable(Exception):
    """No key is configured, or a stored secret cannot be decrypted with the configured keys."""


def _fernet() -> MultiFernet:
    keys = [key.strip() for key in settings.MANGO_VAULT_KEY if key.strip()]
    if not keys:
        raise SecretsUnavailable("MANGO_VAULT_KEY is not set: secrets cannot be stored or read")
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError as exc:
        raise SecretsUnavailable("MANGO_VAULT_KEY holds a key that is not a Fernet key") from exc


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretsUnavailable("a stored secret cannot be decrypted with MANGO_VAULT_KEY's keys") from exc


def reencrypt(token: str) -> str:
    """The same secret under the first key (after a rotation)."""
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretsUnavailable("a stored secret cannot be decrypted with MANGO_VAULT_KEY's keys") from exc


def generate_key() -> str:
    return Fernet.generate_key().decode()


# Every column holding a secret sealed under MANGO_VAULT_KEY, registered by the app that owns it
# (vaults: credential secrets; sessions: repository tokens): what a key rotation re-encrypts.
_sealed_columns: list[tuple[type, str]] = []


def sealed_column_register(model: type, column: str) -> None:
    if (model, column) not in _sealed_columns:
        _sealed_columns.append((model, column))


def secrets_reencrypt() -> int:
    """Every stored secret under MANGO_VAULT_KEY's first key (after a rotation). Returns how many
    were re-encrypted. Each row in its own short transaction."""
    from django.db import transaction

    count = 0
    for model, column in _sealed_columns:
        sealed = model.objects.exclude(**{column: ""})
        for row_id in sealed.values_list("pk", flat=True).iterator():
            with transaction.atomic():
                row = sealed.select_for_update().filter(pk=row_id).first()
                if row is None:
                    continue
                setattr(row, column, reencrypt(getattr(row, column)))
                row.save(update_fields=[column])
                count += 1
    return count
