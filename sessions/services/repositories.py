"""Repository resources: a git repository (any smart-HTTP host) cloned by the worker into the
session's sandbox at its mount path (default /workspace/<repo-name>).

At create and resources.add the URL passes the outbound guard (a private, loopback or link-local
host is a 400 unless the operator allowed it), the checkout and the mount path are checked, and
the token is encrypted before the row is written: it is never returned, logged, put in an event
or an error. The clone itself happens in the worker before a tool call
(sessions/runtime/repositories.py); `resources.update` rotates the token, and a repository whose
last clone failed is tried again with it at the next tool call.
"""

from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from core import outbound
from core.errors import InvalidRequest
from core.models import Workspace
from core.secrets import SecretsUnavailable, encrypt
from processors.errors import ProcessorError
from processors.repositories import MAX_REPOSITORY_RESOURCES, check_checkout, resolve_repository_mount_path
from processors.resources import check_mount_path_available
from sessions.models import Session, SessionResource, resource_ids
from sessions.selectors import session_get

REPOSITORY = SessionResource.Type.GITHUB_REPOSITORY


def _check_url(url: str, *, where: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and (parts.query or parts.fragment or "?" in url or "#" in url):
        # The URL goes into the sandbox's .git/config and into events: nothing may ride along.
        raise InvalidRequest(f"{where}.url: must not carry a query or a fragment.", code="invalid_url")
    try:
        outbound.check_url(url)
    except outbound.OutboundRefused as exc:
        raise InvalidRequest(f"{where}.url: {exc.for_client()}.", code="url_not_allowed") from None


def _seal(token: str | None, *, where: str) -> str:
    if not token:
        return ""
    try:
        return encrypt(token)
    except SecretsUnavailable:
        raise InvalidRequest(
            f"{where}.authorization_token: this server cannot store secrets (MANGO_VAULT_KEY is not set).",
            code="secrets_unavailable",
        ) from None


def repositories_admit(*, params: list[dict], existing: list[str], existing_count: int = 0) -> list[dict]:
    """Check repository params ({field, url, authorization_token, checkout, mount_path}) before
    anything is written: the row fields, the token encrypted. `existing`: the mount paths the
    session's other resources take."""
    if existing_count + len(params) > MAX_REPOSITORY_RESOURCES:
        raise InvalidRequest(
            f"resources: a session has at most {MAX_REPOSITORY_RESOURCES} github_repository resources.",
            code="too_many_resources",
        )
    admitted, paths = [], list(existing)
    for param in params:
        where = param["field"]
        _check_url(param["url"], where=where)
        try:
            checkout = check_checkout(param.get("checkout"))
        except ProcessorError as exc:
            raise InvalidRequest(f"{where}.{exc.message}", code=exc.reason) from None
        try:
            mount_path = resolve_repository_mount_path(param["url"], param.get("mount_path"))
            check_mount_path_available(mount_path, paths)
        except ProcessorError as exc:
            raise InvalidRequest(f"{where}.mount_path: {exc.message}", code=exc.reason) from None
        paths.append(mount_path)
        admitted.append(
            {
                "url": param["url"],
                "checkout": checkout,
                "mount_path": mount_path,
                "authorization_token": _seal(param.get("authorization_token"), where=where),
            }
        )
    return admitted


def repository_rows_create(*, session: Session, admitted: list[dict]) -> list[SessionResource]:
    """Inside the caller's transaction (session row locked)."""
    now = timezone.now()
    return SessionResource.objects.bulk_create(
        SessionResource(id=resource_id, session=session, type=REPOSITORY, created_at=now, updated_at=now, **fields)
        for resource_id, fields in zip(resource_ids(len(admitted)), admitted, strict=True)
    )


def repository_add(*, workspace: Workspace, session_id: str, param: dict) -> SessionResource:
    """resources.add of a github_repository: the row only. A running sandbox gets the clone at
    its next tool call (the worker clones; this process never runs git)."""
    session = session_get(workspace=workspace, session_id=session_id)
    if not session.tool_host.has_sandbox:
        raise InvalidRequest(
            "resource: github_repository resources need a cloud environment (the worker clones them into its"
            " sandbox); a self_hosted environment runs tools on the client's machine.",
            code="repository_not_supported",
        )
    rows = SessionResource.objects.filter(session=session)
    existing = list(rows.values_list("mount_path", flat=True))
    count = rows.filter(type=REPOSITORY).count()
    (admitted,) = repositories_admit(params=[{**param, "field": "resource"}], existing=existing, existing_count=count)
    with transaction.atomic():
        session = session_get(workspace=workspace, session_id=session_id, for_update=True)
        rows = SessionResource.objects.filter(session=session)
        if rows.filter(type=REPOSITORY).count() >= MAX_REPOSITORY_RESOURCES:
            raise InvalidRequest(
                f"resource: a session has at most {MAX_REPOSITORY_RESOURCES} github_repository resources.",
                code="too_many_resources",
            )
        check = admitted["mount_path"]
        for other in rows.values_list("mount_path", flat=True):
            try:
                check_mount_path_available(check, [other])
            except ProcessorError as exc:
                raise InvalidRequest(f"resource.mount_path: {exc.message}", code=exc.reason) from None
        (row,) = repository_rows_create(session=session, admitted=[admitted])
    return row


def repository_token_rotate(*, row: SessionResource, token: str) -> SessionResource:
    """resources.update: the new token, encrypted, for the next clone. A repository whose last
    clone in this sandbox failed is tried again at the next tool call; one already placed stays
    as it is (its working tree is the agent's)."""
    if row.type != REPOSITORY:
        raise InvalidRequest("Only github_repository resources can be updated (authorization_token rotation).")
    sealed = _seal(token, where="resource")
    changes = {"authorization_token": sealed, "updated_at": timezone.now()}
    if row.clone_error:
        changes.update(placed_ref=None, clone_error="")
    with transaction.atomic():
        SessionResource.objects.filter(pk=row.pk).update(**changes)
    row.refresh_from_db()
    return row
