from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self):
        from core.secrets import sealed_column_register
        from webhooks import receivers
        from webhooks.models import WebhookEndpoint

        sealed_column_register(WebhookEndpoint, "secret")
        sealed_column_register(WebhookEndpoint, "previous_secret")
        receivers.connect()
