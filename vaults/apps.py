from django.apps import AppConfig


class VaultsConfig(AppConfig):
    name = "vaults"
    verbose_name = "Vaults"
