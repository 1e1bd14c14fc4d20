from django.db import transaction
from django.utils import timezone

from agents.configs import environment_config_resolve
from agents.models import Environment
from core.metadata import metadata_patch_apply
from core.updates import model_update
from sessions.selectors import environment_get


def environment_create(
    *, workspace, name: str, config: dict, description: str | None, metadata: dict, scope: str | None
) -> Environment:
    now = timezone.now()
    return Environment.objects.create(
        workspace=workspace,
        name=name,
        config=config,
        description=description,
        metadata=metadata,
        scope=scope or "organization",
        created_at=now,
        updated_at=now,
    )


@transaction.atomic
def environment_update(*, workspace, environment_id: str, changes: dict) -> Environment:
    """Omitted fields keep their value; `config` keeps omitted networking/packages; metadata patches."""
    environment = environment_get(workspace=workspace, environment_id=environment_id, for_update=True)
    data = {key: changes[key] for key in ("name", "scope") if changes.get(key) is not None}
    if "description" in changes:
        data["description"] = changes["description"]
    if changes.get("config") is not None:
        data["config"] = environment_config_resolve(changes["config"], environment.config)
    if "metadata" in changes:
        data["metadata"] = metadata_patch_apply(environment.metadata, changes["metadata"], empty_deletes=True)
    return model_update(instance=environment, data=data)


@transaction.atomic
def environment_archive(*, workspace, environment_id: str) -> Environment:
    environment = environment_get(workspace=workspace, environment_id=environment_id, for_update=True)
    environment.archive()
    return environment


def environment_delete(*, workspace, environment_id: str) -> None:
    """Sessions keep a snapshot of the environment's config, so deleting it never breaks them."""
    environment = environment_get(workspace=workspace, environment_id=environment_id)
    environment.delete()
