from django.apps import AppConfig


class FilesConfig(AppConfig):
    name = "files"
    verbose_name = "Files"

    def ready(self):
        from core import readiness

        readiness.register("object_store", _check_object_store)

        from core import metrics
        from files import metrics as files_metrics

        metrics.register_collector("files", files_metrics.collect)


def _check_object_store() -> None:
    from files import storage

    if storage.is_configured():  # unset bucket: the Files routes are off, nothing to check
        storage.ping()
