from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # django.contrib.sessions owns the label "sessions".
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent sessions"

    def ready(self):
        from core import metrics
        from sessions import metrics as sessions_metrics

        metrics.register_collector("sessions", sessions_metrics.collect)
