"""Session outputs on the Files side: the swap that makes a session's visible output Files
exactly the current tree, in one transaction (sessions/services/outputs.py stages the objects
with files.transfers.ObjectStager and calls session_outputs_swap)."""

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.models import Workspace
from files.intents import UploadReclaimed, delete_finish, hide_for_delete
from files.models import File, StorageIntent
from files.quotas import quota_enforce
from files.transfers import StagedObject
from processors.outputs import plan_outputs


@dataclass
class OutputsApplied:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def session_outputs_swap(
    *, workspace: Workspace, session_id: str, staged: dict[str, tuple[StagedObject, str]], keep: set[str]
) -> OutputsApplied:
    """Make a session's visible output Files exactly `keep` (relative paths), in one
    transaction: each staged path (path -> (object, mime type)) becomes a new downloadable,
    session-scoped File, the File it replaces (if any) is hidden in the same commit, and every
    output File whose path is not in `keep` is hidden. So one path never shows two Files and
    never none. The hidden Files' objects and rows are then removed through delete intents.
    Raises UploadReclaimed (nothing changed) if reconciliation claimed a staged object."""
    # Over 60 lines on purpose: one transaction, from the row locks to the commit, read in order.
    crash_point("outputs_before_apply")
    applied = OutputsApplied()
    with transaction.atomic():
        current = {
            file.output_path: file
            for file in File.objects.select_for_update().filter(
                workspace=workspace,
                scope_session_id=session_id,
                origin=File.Origin.SESSION_OUTPUT,
                state=File.State.READY,
            )
        }
        intents = StorageIntent.objects.select_for_update().in_bulk([obj.intent_id for obj, _ in staged.values()])
        if any(
            intents.get(obj.intent_id) is None
            or intents[obj.intent_id].state != StorageIntent.State.OPEN
            or intents[obj.intent_id].attempts
            for obj, _ in staged.values()
        ):
            raise UploadReclaimed()
        tree = {path: current[path].sha256 for path in keep if path in current and path not in staged}
        tree.update({path: obj.sha256 for path, (obj, _) in staged.items()})
        plan = plan_outputs({path: file.sha256 for path, file in current.items()}, tree)
        # A staged path replaces its File even if the bytes match: they were uploaded already.
        applied.replaced = sorted([*plan.changed, *(path for path in plan.unchanged if path in staged)])
        applied.added, applied.removed = plan.added, plan.removed
        applied.unchanged = [path for path in plan.unchanged if path not in staged]
        delete_intents = hide_for_delete([current[path] for path in (*applied.replaced, *applied.removed)])
        now = timezone.now()
        files, closed = [], []
        for path in sorted(staged):
            obj, mime_type = staged[path]
            file = File.new_ready(
                workspace=workspace,
                object_key=obj.object_key,
                filename=path,
                mime_type=mime_type,
                size_bytes=obj.size_bytes,
                sha256=obj.sha256,
                downloadable=True,
                scope_session_id=session_id,
                origin=File.Origin.SESSION_OUTPUT,
                output_path=path,
            )
            files.append(file)
            intent = intents[obj.intent_id]
            intent.state, intent.file_id, intent.closed_at, intent.updated_at = (
                StorageIntent.State.COMMITTED,
                file.id,
                now,
                now,
            )
            closed.append(intent)
        File.objects.bulk_create(files)
        StorageIntent.objects.bulk_update(closed, ["state", "file_id", "closed_at", "updated_at"])
        quota_enforce(workspace_id=workspace.id)
    crash_point("outputs_after_swap")
    for intent in delete_intents:
        delete_finish(intent)
    return applied
