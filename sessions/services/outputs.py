"""Session outputs: publish the sandbox's /mnt/session/outputs as downloadable, session-scoped
Files at every primary idle boundary (spec "Session outputs"; DESIGN flow 6).

The archive is read once, as a tar stream straight from dockerd; each member goes to the object
store as it is read (bounded memory, nothing extracted on the host, links never followed). Then
one transaction makes the visible set of the session's output Files equal the tree: added and
rewritten paths appear, rewritten and removed ones are hidden, in the same commit.
"""

import hashlib
import logging
import mimetypes
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from django.conf import settings

import sandboxes as sandbox
from core.streams import buffered_reader
from files.models import File
from files.outputs import OutputsApplied, session_outputs_swap
from files.quotas import StorageQuotaExceeded
from files.selectors import session_outputs_current, store_is_configured
from files.transfers import ObjectStager
from processors.outputs import (
    ARCHIVE_ROOT,
    MAX_OUTPUT_FILES,
    OUTPUTS_DIR,
    check_output_count,
    classify_output_member,
)
from sessions import events as ev
from sessions.events import EventType
from sessions.models import Session
from sessions.services.events import session_event_append

logger = logging.getLogger(__name__)

READ_CHUNK = 1024 * 1024


class OutputsMountMissing(Exception):
    """The session's durable sandbox predates the outputs mount: fail closed."""

    message = (
        f"The session's sandbox was created before {OUTPUTS_DIR} was mounted, so its outputs cannot be "
        "published. Delete the session and create a new one to get a sandbox with the outputs mount."
    )


@dataclass
class PublishReport(OutputsApplied):
    """What the swap applied (added, replaced, removed, unchanged paths), and what the tree read
    found wrong."""

    # One human-readable reason per offending path, naming the path.
    invalid: ev.BoundedNames = field(default_factory=ev.BoundedNames)
    uploads: int = 0


def _open_archive(chunks: Iterable[bytes]) -> tarfile.TarFile:
    # "r|": a forward-only stream; members must be read in order, nothing is seekable or cached.
    return tarfile.open(fileobj=buffered_reader(chunks, READ_CHUNK), mode="r|")


def _member_chunks(archive: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    reader = archive.extractfile(member)
    while chunk := reader.read(READ_CHUNK):
        yield chunk


def _sha256(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _mime_type(path: str) -> str:
    return mimetypes.guess_type(path, strict=False)[0] or "application/octet-stream"


def _relative_link_target(linkname: str) -> str | None:
    root = ARCHIVE_ROOT + "/"
    return linkname[len(root) :] if linkname.startswith(root) else None


def publication_applies(*, session: Session) -> bool:
    """Outputs are published only for Docker sandboxes of cloud environments with Files storage
    configured, and only once a sandbox exists: a text-only session never gets one just to look."""
    if not store_is_configured() or not session.tool_host.docker_sandbox:
        return False
    return session.sandbox_state != Session.SandboxState.NONE


class _TreeReader:
    """One publication's pass over the outputs tree: what to keep, what to stage (upload), and
    what is invalid. Same-size files are hashed without uploading; their bytes are uploaded
    only when they changed (read again, as the forward-only stream has moved on)."""

    def __init__(self, *, session: Session, stager: ObjectStager, current: dict[str, File], max_bytes: int):
        self.session, self.stager, self.current, self.max_bytes = session, stager, current, max_bytes
        self.report = PublishReport()
        self.keep: set[str] = set()  # relative paths that stay or become visible: the tree as published
        self.staged: set[str] = set()
        self.refetch: list[str] = []
        self.hard_link_targets: set[str] = set()
        self.over_limit: list[str] = []

    def stage(self, path: str, member: tarfile.TarInfo, chunks: Iterable[bytes]) -> None:
        self.stager.stage(path, chunks=chunks, mime_type=_mime_type(path), size=member.size)
        self.staged.add(path)
        self.keep.add(path)
        self.report.uploads += 1

    def read_tree(self) -> None:
        chunks, _ = sandbox.get_archive(session_id=self.session.id)
        with _open_archive(chunks) as archive:
            for member in archive:
                self._member(archive, member)

    def _member(self, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        kind, value = classify_output_member(member, max_bytes=self.max_bytes)
        if kind == "dir":
            return
        if kind == "invalid":
            self.report.invalid.append(value)
            if member.islnk() and (target := _relative_link_target(member.linkname)):
                self.hard_link_targets.add(target)
            return
        path = value
        if len(self.keep) + len(self.refetch) >= MAX_OUTPUT_FILES:
            self.over_limit.append(path)
            return
        existing = self.current.get(path)
        if existing is not None and existing.size_bytes == member.size:
            # Same size: hash without uploading; only new bytes are worth an upload.
            if _sha256(_member_chunks(archive, member)) == existing.sha256:
                self.keep.add(path)
            else:
                self.refetch.append(path)
            return
        self.stage(path, member, _member_chunks(archive, member))

    def read_changed(self) -> None:
        """Same size, new bytes: read just those files again."""
        for path in self.refetch:
            chunks, _ = sandbox.get_archive(session_id=self.session.id, path=f"{OUTPUTS_DIR}/{path}")
            with _open_archive(chunks) as archive:
                member = archive.next()
                if member is None or not member.isreg():
                    self.report.invalid.append(f"{OUTPUTS_DIR}/{path}: changed while it was being published")
                    continue
                self.stage(path, member, _member_chunks(archive, member))

    def drop_unpublishable(self) -> None:
        # The first name of a hard-linked file arrives as a regular member; its partner names it.
        for path in sorted(self.hard_link_targets & self.keep):
            self.report.invalid.append(f"{OUTPUTS_DIR}/{path}: hard links are not published")
            self.keep.discard(path)
            if path in self.staged:
                self.staged.discard(path)
                self.stager.discard(path)
        if self.over_limit:
            reason = check_output_count(len(self.keep) + len(self.over_limit))
            self.report.invalid.extend(f"{OUTPUTS_DIR}/{path}: {reason}" for path in self.over_limit)


def outputs_publish(*, session: Session) -> PublishReport:
    """Make the session's visible output Files equal the regular files now under
    /mnt/session/outputs. Invariants: an unchanged path keeps its File and costs no upload; a
    rewritten path is replaced atomically (never two Files, never none); a removed path is hidden
    and its object deleted through the delete-intent path; at most 500 files and 500 MB each;
    links, devices, FIFOs and traversing names are reported in `invalid`, never published.
    Idempotent: a retry after a crash converges on the same visible set (staged objects of a
    killed run are open upload intents that reconciliation removes).

    Raises OutputsMountMissing for a sandbox without the outputs mount (never an empty tree).
    """
    if not sandbox.has_outputs_mount(session_id=session.id):
        raise OutputsMountMissing(OutputsMountMissing.message)
    workspace = session.workspace
    max_bytes = settings.MANGO_FILE_MAX_BYTES
    current = session_outputs_current(workspace=workspace, session_id=session.id)
    with ObjectStager(workspace=workspace, max_bytes=max_bytes) as stager:
        tree = _TreeReader(session=session, stager=stager, current=current, max_bytes=max_bytes)
        tree.read_tree()
        tree.read_changed()
        tree.drop_unpublishable()
        objects = stager.results()
        result = session_outputs_swap(
            workspace=workspace,
            session_id=session.id,
            staged={path: (objects[path], _mime_type(path)) for path in tree.staged},
            keep=tree.keep,
        )
    report = tree.report
    for applied in fields(OutputsApplied):
        setattr(report, applied.name, getattr(result, applied.name))
    logger.info(
        "outputs published: %d added, %d replaced, %d unchanged, %d removed, %d invalid, %d uploads",
        len(report.added),
        len(report.replaced),
        len(report.unchanged),
        len(report.removed),
        report.invalid.total,
        report.uploads,
        extra={"session_id": session.id},
    )
    return report


def _session_error(*, session: Session, message: str) -> None:
    # A recoverable error: the turn's answer stays, the session goes idle and stays usable.
    session_event_append(session_id=session.id, type=EventType.SESSION_ERROR, payload=ev.session_error(message=message))


def outputs_publish_at_idle(*, session: Session, interrupted: bool) -> PublishReport | None:
    """The runner's idle-boundary hook: publish outputs before session.status_idle is committed,
    and report anything not published as one session.error just before the idle event. An
    explicit interrupt skips publication so that cancelling is never delayed by a snapshot."""
    if interrupted or not publication_applies(session=session):
        return None
    try:
        report = outputs_publish(session=session)
    except (OutputsMountMissing, StorageQuotaExceeded) as exc:
        _session_error(session=session, message=str(exc))
        return None
    except Exception as exc:  # the store or dockerd failed: report it, never wedge the turn
        logger.exception("outputs publication failed", extra={"session_id": session.id})
        _session_error(
            session=session,
            message=f"Files under {OUTPUTS_DIR} could not be published ({type(exc).__name__}); "
            "the previously published files are unchanged. They will be published at the next idle.",
        )
        return None
    if report.invalid:
        count = report.invalid.total
        _session_error(
            session=session,
            message=f"{count} entr{'y' if count == 1 else 'ies'} under {OUTPUTS_DIR} "
            f"{'was' if count == 1 else 'were'} not published: {report.invalid.listed()}. "
            "Only regular files (at most 500, each at most 500 MB) are published; remove or replace "
            "these entries in a later turn.",
        )
    return report
