"""Repository resources in the worker: before a sandbox tool call, every repository not yet
tried in the session's sandbox is cloned here (integrations/git.py: never in the sandbox, so the
token never enters it) and its working tree streamed into the sandbox at its mount path.

A failure is a repository_* session.error (always `retrying`: the session goes on without that
repository, and the tool call still runs); the repository is not tried again in this sandbox
unless its token is rotated. Per workspace, at most MANGO_WORKSPACE_REPOSITORY_CLONES clones run
at once on the whole fleet (slots in Redis, core/caps.py), each bounded by the smaller of
MANGO_REPOSITORY_MAX_BYTES and MANGO_WORKSPACE_REPOSITORY_DISK_BYTES / that count, so what one
workspace makes workers hold on disk stays under MANGO_WORKSPACE_REPOSITORY_DISK_BYTES. The
scratch directory is removed once the tree is placed, or failed.
"""

import logging
import posixpath
import time
from collections.abc import Callable

from django.conf import settings

import sandboxes as sandbox
from core.caps import thread_gate
from core.errors import RateLimited
from core.secrets import SecretsUnavailable, decrypt
from integrations import git
from processors.repositories import CLONE, GitFailure, tar_stream_for_tree
from sessions import events as ev
from sessions.events import EventType
from sessions.models import Session
from sessions.runtime.control import TurnControl, db_release
from sessions.selectors.runner import RepositoryToClone, session_repositories_unplaced
from sessions.services.events import events_append
from sessions.services.runner import session_repository_tried

logger = logging.getLogger(__name__)

CAP_KIND = "repository clones"
SLOT_POLL_SECONDS = 0.25


def clone_max_bytes() -> int:
    """The bound of one clone: a workspace's disk share divided among its concurrent clones."""
    per_workspace = settings.MANGO_WORKSPACE_REPOSITORY_DISK_BYTES // max(1, settings.MANGO_WORKSPACE_REPOSITORY_CLONES)
    return max(0, min(settings.MANGO_REPOSITORY_MAX_BYTES, per_workspace))


def repositories_place(*, control: TurnControl, session: Session, fresh: bool = False) -> int:
    """Clone and place the session's repositories not yet tried in its sandbox; append a
    session.error for each that fails. `fresh`: the sandbox was just made (the agent has left
    nothing at any mount path yet). Returns how many were placed."""
    ref = session.sandbox_ref
    placed = 0
    # One time limit for all of them: a session's repositories hold this worker thread no longer.
    deadline = time.monotonic() + settings.MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS
    for repository in session_repositories_unplaced(session_id=session.id, ref=ref):
        control.check_stop()
        failure = clone_and_place(
            deadline=deadline,
            session_id=session.id,
            workspace_id=session.workspace_id,
            repository=repository,
            should_stop=control.should_stop,
            fresh=fresh,
        )
        control.check_stop()  # interrupted or deleted meanwhile: not tried, nothing reported
        session_repository_tried(resource_id=repository.id, ref=ref, error_type=failure.type if failure else "")
        if failure is None:
            placed += 1
            continue
        logger.info(
            "repository not placed",
            extra={"session_id": session.id, "resource_id": repository.id, "error_type": failure.type},
        )
        payload = ev.repository_error(error_type=failure.type, message=failure.message, repository_url=repository.url)
        events_append(session_id=session.id, items=[ev.item(EventType.SESSION_ERROR, payload)])
    return placed


def clone_and_place(
    *,
    session_id: str,
    workspace_id: str,
    repository: RepositoryToClone,
    should_stop: Callable[[], bool],
    fresh: bool = False,
    deadline: float | None = None,
) -> GitFailure | None:
    """Clone one repository (in one of the workspace's clone slots) and stream its tree into
    the session's sandbox; the failure, or None. The scratch directory is gone either way."""
    db_release()  # no connection held while git and dockerd work
    if deadline is None:
        deadline = time.monotonic() + settings.MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS
    if time.monotonic() >= deadline:
        return GitFailure(CLONE, "The session's repositories took longer than this server allows; not cloned.")
    try:
        token = decrypt(repository.sealed_token) if repository.sealed_token else None
    except SecretsUnavailable:
        return GitFailure(CLONE, "The repository's token cannot be read by this server (MANGO_VAULT_KEY changed).")
    try:
        slot = clone_slot(workspace_id=workspace_id, deadline=deadline, should_stop=should_stop)
    except git.CloneFailed as exc:
        return exc.failure
    try:
        return _clone_and_place_in_slot(
            session_id=session_id,
            repository=repository,
            token=token,
            fresh=fresh,
            deadline=deadline,
            should_stop=should_stop,
        )
    except Exception:  # the session goes on without the repository
        logger.exception("repository clone failed", extra={"session_id": session_id})
        return GitFailure(CLONE, "The repository could not be cloned.")
    finally:
        thread_gate().release(slot)


def _clone_and_place_in_slot(
    *, session_id: str, repository: RepositoryToClone, token: str | None, fresh: bool, deadline: float, should_stop
) -> GitFailure | None:
    try:
        work = git.clone(
            url=repository.url,
            token=token,
            checkout=repository.checkout,
            max_bytes=clone_max_bytes(),
            timeout=max(0.1, deadline - time.monotonic()),
            should_cancel=should_stop,
        )
    except git.CloneFailed as exc:
        return exc.failure
    try:
        parent, top = posixpath.split(repository.mount_path)
        stream = tar_stream_for_tree(
            git.tree_entries(work), top=top, uid=settings.MANGO_SANDBOX_UID, gid=settings.MANGO_SANDBOX_UID
        )
        if not fresh:
            # What the agent left at the mount path gives way to the repository (a link is
            # removed, never followed).
            sandbox.remove_tree(session_id=session_id, path=repository.mount_path)
        sandbox.put_archive(session_id=session_id, directory=parent or "/", chunks=stream)
    except (sandbox.SandboxError, OSError, ValueError):
        logger.warning("repository placement failed", extra={"session_id": session_id}, exc_info=True)
        return GitFailure(CLONE, f"The repository was cloned but could not be placed at {repository.mount_path}.")
    finally:
        git.discard(work)
    return None


def clone_slot(*, workspace_id: str, deadline: float, should_stop: Callable[[], bool]):
    """One of the workspace's clone slots (release it with core.caps.thread_gate().release),
    waiting for one until `deadline` (time.monotonic); CloneFailed past it."""
    limit = max(1, settings.MANGO_WORKSPACE_REPOSITORY_CLONES)
    while True:
        try:
            return thread_gate().take(kind=CAP_KIND, workspace_id=workspace_id, limit=limit)
        except RateLimited:
            if time.monotonic() > deadline or should_stop():
                raise git.CloneFailed(
                    GitFailure(
                        CLONE,
                        f"This workspace had {limit} repository clones in progress (its limit) for as long as a "
                        "clone may take; the repository was not cloned.",
                    )
                ) from None
            time.sleep(SLOT_POLL_SECONDS)
