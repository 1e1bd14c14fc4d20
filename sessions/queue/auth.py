"""The self-hosted worker's credentials at the API's edge (sessions/queue/credentials.py names them):

- an **environment key** authenticates only its own environment's worker routes: `work/poll`,
  `work` (list), and `work/{id}/ack|heartbeat|stop`. Everywhere else (every route that takes an
  API key, `work/{id}` retrieve and update and `work/stats` included) it is a 401.
- a **work token** (the `sessions_token` of an item's `secret`) authenticates only the calls the
  SDK's EnvironmentWorker makes for that item while it is open: its session's retrieve, events
  (list, send, stream) and threads, the item's own ack, heartbeat and stop, the skills the
  session's agent runs (retrieve, versions, content) and the memory stores attached to the
  session (the store and its memories read; the memories written only where the store is
  attached `read_write`). Anything else is a 401.

An API key is never either: core.auth authenticates it, and the work routes that take only the
environment key refuse it (sessions/queue/apis.py)."""

import re
from dataclasses import dataclass, field

from rest_framework.authentication import BaseAuthentication

from core.auth import raw_key_from_meta
from core.errors import AuthenticationFailed
from sessions.models import EnvironmentKey, SessionMemoryStore, WorkItem
from sessions.queue import credentials
from sessions.queue.selectors import environment_key_resolve, work_session_scope, work_token_resolve
from sessions.queue.services import HeartbeatPreconditionFailed, environment_key_touch, lease_state

_WORKER_WORK_PATH = re.compile(
    r"^/v1/environments/(?P<env>[^/]+)/work(?:/poll|/(?P<work>[^/]+)/(?:ack|heartbeat|stop))?$"
)


@dataclass
class WorkGrant:
    """What a work token authorizes: one open work item (its session, environment)."""

    item: WorkItem
    scope: dict = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return self.item.session_id


def is_worker_credential(raw: str | None) -> bool:
    return bool(raw) and raw.startswith((credentials.ENVIRONMENT_KEY_PREFIX, credentials.WORK_TOKEN_PREFIX))


def _token_allows(grant: WorkGrant, method: str, path: str) -> bool:
    item = grant.item
    session = re.escape(item.session_id)
    reads = [
        rf"/v1/sessions/{session}",
        rf"/v1/sessions/{session}/events/stream",
        rf"/v1/sessions/{session}/threads(/[^/]+(/events|/stream)?)?",
    ]
    if method in ("GET", "HEAD") and any(re.fullmatch(p, path) for p in reads):
        return True
    if method in ("GET", "POST") and path == f"/v1/sessions/{item.session_id}/events":
        return True
    work = f"/v1/environments/{item.environment_id}/work/{item.id}/"
    if method == "POST" and path in (work + "ack", work + "heartbeat", work + "stop"):
        return True
    skill = re.fullmatch(r"/v1/skills/([^/]+)(/versions(/[^/]+(/content)?)?)?", path)
    if method in ("GET", "HEAD") and skill and skill.group(1) in grant.scope.get("skills", ()):
        return True
    store = re.fullmatch(r"/v1/memory_stores/([^/]+)(/memories(?:/[^/]+)?)?", path)
    access = grant.scope.get("memory_stores", {}).get(store.group(1)) if store else None
    if access is None:
        return False
    if method in ("GET", "HEAD"):
        return True
    return bool(store.group(2)) and method in ("POST", "DELETE") and access == SessionMemoryStore.Access.READ_WRITE


def _superseded_heartbeat(raw: str, *, method: str, path: str) -> None:
    """The heartbeat of a holder whose claim a reclaim superseded: its token authorizes nothing
    more, but it is told what the heartbeat's 412 tells (the lease is lost), so the SDK's worker
    lets the item go instead of force-stopping it under the new holder."""
    if method != "POST" or not path.endswith("/heartbeat"):
        return
    item = work_token_resolve(raw_token=raw, superseded=True)
    if item is not None and path == f"/v1/environments/{item.environment_id}/work/{item.id}/heartbeat":
        raise HeartbeatPreconditionFailed(
            "This token's claim of the work item was superseded: another worker holds it now.",
            details={"current_state": lease_state(item)},
        )


def worker_credential_authenticate(meta: dict, *, method: str, path: str):
    """(workspace, credential) for a worker credential allowed on `method path`: an EnvironmentKey
    or a WorkGrant; None when the request carries no worker credential (an API key, or nothing);
    AuthenticationFailed when it carries one that does not authorize this call."""
    raw = raw_key_from_meta(meta)
    if not is_worker_credential(raw):
        return None
    if raw.startswith(credentials.ENVIRONMENT_KEY_PREFIX):
        key = environment_key_resolve(raw_key=raw)
        if key is None:
            raise AuthenticationFailed("Invalid environment key.")
        match = _WORKER_WORK_PATH.match(path)
        if match is None or match.group("env") != key.environment_id or (method == "GET") == bool(match.group("work")):
            raise AuthenticationFailed(
                "An environment key authenticates only its environment's work poll, list, ack, heartbeat and stop;"
                " this route takes an API key."
            )
        environment_key_touch(key=key)
        return key.workspace, key
    item = work_token_resolve(raw_token=raw)
    if item is None:
        _superseded_heartbeat(raw, method=method, path=path)
        raise AuthenticationFailed("Invalid work token: it is not one this server issued, or its work item stopped.")
    grant = WorkGrant(item=item)
    if path.startswith(("/v1/skills/", "/v1/memory_stores/")):
        grant.scope = work_session_scope(item=item)
    if not _token_allows(grant, method, path):
        raise AuthenticationFailed(
            "A work item's token authorizes only its session's calls (retrieve, events, threads), its own"
            " ack, heartbeat and stop, and its session's skills and memory stores."
        )
    return item.workspace, grant


def worker_workspace_of(meta: dict) -> str | None:
    """The workspace a worker credential belongs to (None for anything else, or an invalid one):
    core.shares counts a worker's requests in its tenant's share, not in the anonymous one."""
    raw = raw_key_from_meta(meta)
    if not is_worker_credential(raw):
        return None
    if raw.startswith(credentials.ENVIRONMENT_KEY_PREFIX):
        key = environment_key_resolve(raw_key=raw)
        return key.workspace_id if key is not None else None
    item = work_token_resolve(raw_token=raw)
    return item.workspace_id if item is not None else None


class WorkerCredentialAuthentication(BaseAuthentication):
    """First of the API's authentication classes: answers for worker credentials only (None for
    anything else, which core.auth.ApiKeyAuthentication then authenticates)."""

    def authenticate(self, request):
        return worker_credential_authenticate(request.META, method=request.method, path=request.path_info)

    def authenticate_header(self, request):
        return "Bearer"


def credential_kind(auth) -> str:
    if isinstance(auth, EnvironmentKey):
        return "environment_key"
    if isinstance(auth, WorkGrant):
        return "work_token"
    return "api_key"
