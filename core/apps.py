from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class CoreConfig(AppConfig):
    default = True  # this module also holds MangoAdminConfig
    name = "core"
    verbose_name = "Workspaces and API keys"

    def ready(self):
        from core import database

        database.pool_retry_constant()

        from core import readiness

        readiness.register("postgresql", readiness.check_database)
        readiness.register("redis", readiness.check_redis)
        readiness.register("celery_worker", readiness.check_celery_worker)

        from core import metrics

        metrics.register_collector("celery", metrics.celery_collect)

        from core import dashboard, dashboard_panels

        dashboard.register(
            key="celery", title="Workers", template="admin/mango/panel_celery.html",
            context=dashboard_panels.celery_panel, order=30,
        )  # fmt: skip

        from core import schema  # noqa: F401 — registers the OpenAPI authentication extension


class MangoAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the operator dashboard as its index."""

    default = False  # core's default is CoreConfig; settings name this class explicitly
    default_site = "core.admin_site.MangoAdminSite"
