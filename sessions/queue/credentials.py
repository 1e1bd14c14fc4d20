"""The self-hosted worker's two credentials, told apart from API keys by their prefixes (no ORM).

- An **environment key** (`mango-envkey-…`): the standing credential of one self_hosted
  environment's workers. Stored as its SHA-256 only (sessions.models.EnvironmentKey).
- A **work token** (`mango-worktoken-<work id>.<claim>.<mac>`): the `sessions_token` inside a
  work item's `secret`, as the SDK's EnvironmentWorker decodes it (lib/environments/_worker.py
  `_sessions_token_from_secret`). It names its work item and the claim that handed it out (the
  item's `claims` count), signed with both (django.core.signing) under SECRET_KEY, so it is stored
  nowhere; it authorizes only that item's session calls while that claim holds: a poll that hands
  the item out again (a reclaim) counts a new claim and so a new token, and the old one is dead.
"""

import base64
import hashlib
import json
import secrets

from django.core import signing
from django.utils.crypto import constant_time_compare

ENVIRONMENT_KEY_PREFIX = "mango-envkey-"
WORK_TOKEN_PREFIX = "mango-worktoken-"


def credential_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def environment_key_generate() -> str:
    return ENVIRONMENT_KEY_PREFIX + secrets.token_urlsafe(32)


def _signer() -> signing.Signer:
    return signing.Signer(salt="mango.work-token")


def work_token(*, work_id: str, session_id: str, claim: int, key: str | None = None) -> str:
    """The token of one claim of a work item, signed by django.core.signing (SECRET_KEY, or `key`)."""
    mac = _signer().signature(f"{work_id}:{session_id}:{claim}", key=key)
    return f"{WORK_TOKEN_PREFIX}{work_id}.{claim}.{mac}"


def work_token_parse(raw: str) -> tuple[str, int] | None:
    """The work id and claim a token names (not yet verified), or None for anything that is not one."""
    if not raw.startswith(WORK_TOKEN_PREFIX):
        return None
    work_id, claim, mac = [*raw[len(WORK_TOKEN_PREFIX) :].split(".", 2), "", ""][:3]
    if not work_id or not mac or len(work_id) > 64 or not claim.isdigit() or len(claim) > 9:
        return None
    return work_id, int(claim)


def work_token_valid(raw: str, *, work_id: str, session_id: str, claim: int) -> bool:
    """Signed for this claim under SECRET_KEY or, after a rotation, one of SECRET_KEY_FALLBACKS."""
    signer = _signer()
    return any(
        constant_time_compare(raw, work_token(work_id=work_id, session_id=session_id, claim=claim, key=key))
        for key in (signer.key, *signer.fallback_keys)
    )


def work_secret(*, work_id: str, session_id: str, claim: int) -> str:
    """A work item's `secret`: URL-safe base64 JSON (unpadded) carrying its `sessions_token`."""
    payload = json.dumps({"sessions_token": work_token(work_id=work_id, session_id=session_id, claim=claim)}).encode()
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")
