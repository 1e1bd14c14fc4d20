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

        from core import dashboard
        from files.dashboard import storage_panel

        dashboard.register(key="files", title="Storage", template="admin/mango/panel_files.html", context=storage_panel)


def _check_object_store() -> None:
    from files import storage

    if storage.is_configured():  # unset bucket: the Files routes are off, nothing to check
        storage.ping()
