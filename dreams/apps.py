from django.apps import AppConfig


class DreamsConfig(AppConfig):
    name = "dreams"
    label = "dreams"
    verbose_name = "Dreams"

    def ready(self) -> None:
        from dreams.receivers import connect

        connect()
