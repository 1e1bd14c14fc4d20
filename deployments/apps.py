from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    label = "deployments"
    verbose_name = "Deployments"
