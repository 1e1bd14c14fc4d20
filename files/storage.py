"""The only module that talks to the object store (django-storages' S3Storage, over boto3).

Object keys are random and prefixed by workspace; user filenames never reach a key.
"""

from django.conf import settings
from django.core.files.storage import storages

from core.errors import ServiceUnavailable


def is_configured() -> bool:
    return bool(settings.MANGO_FILE_S3_BUCKET)


def require_configured() -> None:
    if not is_configured():
        raise ServiceUnavailable(
            "Files storage is not configured: set MANGO_FILE_S3_BUCKET (and the MANGO_FILE_S3_* "
            "endpoint, region and credential variables) to enable the Files API.",
            code="files_storage_not_configured",
        )


def _storage():
    # Django's StorageHandler caches the instance (and resets it when settings change).
    return storages["files"]


def client():
    """The boto3 S3 client behind django-storages (thread-safe; shared)."""
    return _storage().connection.meta.client


def bucket() -> str:
    return settings.MANGO_FILE_S3_BUCKET


def ping() -> None:
    client().head_bucket(Bucket=bucket())
