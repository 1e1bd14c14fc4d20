from django.apps import AppConfig


class VaultsConfig(AppConfig):
    name = "vaults"
    verbose_name = "Vaults"

    def ready(self):
        from core.secrets import sealed_column_register
        from vaults.models import VaultCredential

        sealed_column_register(VaultCredential, "secret")
