"""Secrets at rest (core/secrets.py): Fernet under MANGO_VAULT_KEY, rotation with MultiFernet, and
a clear error without a key."""

import pytest

from core import secrets
from core.secrets import SecretsUnavailable


def test_round_trip_and_ciphertext_hides_the_secret():
    token = secrets.encrypt("ghp_supersecret")
    assert "ghp_supersecret" not in token
    assert secrets.encrypt("ghp_supersecret") != token  # random IV each time
    assert secrets.decrypt(token) == "ghp_supersecret"


def test_rotation_new_key_first_old_still_decrypts(settings):
    old, new = secrets.generate_key(), secrets.generate_key()
    settings.MANGO_VAULT_KEY = [old]
    stored = secrets.encrypt("s3cr3t")
    settings.MANGO_VAULT_KEY = [new, old]
    assert secrets.decrypt(stored) == "s3cr3t"
    rotated = secrets.reencrypt(stored)
    settings.MANGO_VAULT_KEY = [new]
    assert secrets.decrypt(rotated) == "s3cr3t"
    with pytest.raises(SecretsUnavailable, match="cannot be decrypted"):
        secrets.decrypt(stored)


def test_no_key_or_a_bad_key_is_a_clear_error(settings):
    settings.MANGO_VAULT_KEY = []
    with pytest.raises(SecretsUnavailable, match="MANGO_VAULT_KEY is not set"):
        secrets.encrypt("x")
    settings.MANGO_VAULT_KEY = ["not-a-key"]
    with pytest.raises(SecretsUnavailable, match="not a Fernet key"):
        secrets.encrypt("x")
