from django.db import transaction
from django.utils import timezone

from sessions.models import Environment
from sessions.selectors import environment_get
from sessions.serializers.common import apply_metadata_patch
from sessions.serializers.environments import parse_environment_config


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
    if "name" in changes and changes["name"] is not None:
        environment.name = changes["name"]
    if "description" in changes:
        environment.description = changes["description"]
    if "scope" in changes and changes["scope"] is not None:
        environment.scope = changes["scope"]
    if "config" in changes and changes["config"] is not None:
        environment.config = parse_environment_config(changes["config"], environment.config)
    if "metadata" in changes:
        environment.metadata = apply_metadata_patch(environment.metadata, changes["metadata"])
    environment.updated_at = timezone.now()
    environment.save()
    return environment


@transaction.atomic
def environment_archive(*, workspace, environment_id: str) -> Environment:
    environment = environment_get(workspace=workspace, environment_id=environment_id, for_update=True)
    environment.archive()
    return environment


def environment_delete(*, workspace, environment_id: str) -> None:
    """Sessions keep a snapshot of the environment's config, so deleting it never breaks them."""
    environment = environment_get(workspace=workspace, environment_id=environment_id)
    environment.delete()
