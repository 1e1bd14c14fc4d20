from django.apps import AppConfig


class FilesConfig(AppConfig):
    name = "files"
    verbose_name = "Files"

    def ready(self):
        from core import errors
        from processors.errors import ProcessorError

        # The processors' client errors (files and sessions both raise them) are 400s.
        errors.register_mapping(ProcessorError, lambda exc: errors.InvalidRequest(exc.message, code=exc.reason))

        from core import readiness

        readiness.register("object_store", _check_object_store)

        from core import metrics
        from files import metrics as files_metrics

        metrics.register_collector("files", files_metrics.collect)

        from core import dashboard
        from files.dashboard import storage_panel

        dashboard.register(key="files", title="Storage", template="admin/mango/panel_files.html", context=storage_panel)


def _check_object_store() -> None:
    from django.conf import settings
    from django.core.files.storage import storages

    from core.readiness import NotReady
    from files import storage

    if not storage.is_configured():  # unset bucket: the Files routes are off, nothing to check
        return
    try:
        storage.ping()
    except Exception as exc:  # readiness reports any failure, naming the endpoint
        reason = getattr(exc, "details", {}).get("store_error") or type(exc).__name__
        endpoint = storages["files"].endpoint_url or f"AWS S3 ({settings.MANGO_FILE_S3_REGION})"
        raise NotReady(f"{reason} at {endpoint} (bucket {settings.MANGO_FILE_S3_BUCKET})") from exc
