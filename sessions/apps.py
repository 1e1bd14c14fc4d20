from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # django.contrib.sessions owns the label "sessions".
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent sessions"

    def ready(self):
        from core import metrics
        from sessions import (
            checks,  # noqa: F401 — registers the model upstream check
            schema,  # noqa: F401 — registers the worker credential's OpenAPI scheme
        )
        from sessions import metrics as sessions_metrics

        metrics.register_collector("sessions", sessions_metrics.collect)

        # Framing happens at the edge, after commit: the streams layer renders the wake-ups
        # that appends publish (sessions.notify.events_committed).
        from sessions import notify
        from sessions.streams import framing

        notify.wakeup_renderer_install(framing.wakeup)

        from core import shares
        from sessions.queue.auth import worker_workspace_of

        shares.workspace_resolver_install(worker_workspace_of)

        # Repository tokens are sealed like vault secrets (core/secrets.py: key rotation).
        from core.secrets import sealed_column_register
        from sessions.models import SessionResource

        sealed_column_register(SessionResource, "authorization_token")

        # A vault's secrets changed: running sandboxes lose their egress proxies after the commit.
        from sessions.services.sandboxes import sandbox_proxies_revoke_on_commit
        from vaults.signals import secrets_changed

        def _vault_secrets_changed(sender, *, workspace_id, vault_id, **kwargs):
            sandbox_proxies_revoke_on_commit(workspace_id=workspace_id, vault_id=vault_id)

        secrets_changed.connect(_vault_secrets_changed, weak=False, dispatch_uid="sessions.vault_secrets_changed")

        from core import dashboard
        from sessions.dashboard import sessions_panel

        dashboard.register(
            key="sessions",
            title="Sessions",
            template="admin/mango/panel_sessions.html",
            context=sessions_panel,
            order=20,
        )
