"""The self-hosted worker's two credentials, told apart from API keys by their prefixes (no ORM).

- An **environment key** (`mango-envkey-…`): the standing credential of one self_hosted
  environment's workers. Stored as its SHA-256 only (sessions.models.EnvironmentKey).
- A **work token** (`mango-worktoken-<work id>.<mac>`): the `sessions_token` inside a work
  item's `secret`, as the SDK's EnvironmentWorker decodes it (lib/environments/_worker.py
  `_sessions_token_from_secret`). It names its work item and carries an HMAC of it under
  SECRET_KEY, so it is stored nowhere and a poll that hands the item out again can hand out the
  same token; it authorizes only that item's session calls, until the item stops.
"""

import base64
import hashlib
import hmac
import json
import secrets

from django.conf import settings

ENVIRONMENT_KEY_PREFIX = "mango-envkey-"
WORK_TOKEN_PREFIX = "mango-worktoken-"


def credential_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def environment_key_generate() -> str:
    return ENVIRONMENT_KEY_PREFIX + secrets.token_urlsafe(32)


def _mac(work_id: str, session_id: str) -> str:
    digest = hmac.new(
        settings.SECRET_KEY.encode(), f"mango-work-token:{work_id}:{session_id}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def work_token(*, work_id: str, session_id: str) -> str:
    return f"{WORK_TOKEN_PREFIX}{work_id}.{_mac(work_id, session_id)}"


def work_token_work_id(raw: str) -> str | None:
    """The work id a token names (not yet verified), or None for anything that is not one."""
    if not raw.startswith(WORK_TOKEN_PREFIX):
        return None
    work_id, dot, mac = raw[len(WORK_TOKEN_PREFIX) :].partition(".")
    if not dot or not work_id or not mac or len(work_id) > 64:
        return None
    return work_id


def work_token_valid(raw: str, *, work_id: str, session_id: str) -> bool:
    return hmac.compare_digest(raw.encode(), work_token(work_id=work_id, session_id=session_id).encode())


def work_secret(*, work_id: str, session_id: str) -> str:
    """A work item's `secret`: URL-safe base64 JSON (unpadded) carrying its `sessions_token`."""
    payload = json.dumps({"sessions_token": work_token(work_id=work_id, session_id=session_id)}).encode()
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")
