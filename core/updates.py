"""Partial updates that write what changed (STYLE.md 19)."""

from django.utils import timezone


def model_update(*, instance, data: dict):
    """Set `data`'s fields on `instance` and save only those (and `updated_at`, always touched,
    when the model has it), in one UPDATE. Returns the instance."""
    fields = list(data)
    for field, value in data.items():
        setattr(instance, field, value)
    if hasattr(instance, "updated_at"):
        instance.updated_at = timezone.now()
        fields.append("updated_at")
    if fields:
        instance.save(update_fields=fields)
    return instance
