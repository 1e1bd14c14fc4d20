from django.apps import AppConfig


class ProcessorsConfig(AppConfig):
    name = "processors"
    verbose_name = "File processors"
