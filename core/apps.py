from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Workspaces and API keys"

    def ready(self):
        from core import readiness

        readiness.register("postgresql", readiness.check_database)
        readiness.register("redis", readiness.check_redis)
        readiness.register("celery_worker", readiness.check_celery_worker)

        from core import metrics

        metrics.register_collector("celery", metrics.celery_collect)
