"""System checks (`manage.py check`, run by migrate and at `make run` start): the model upstream.

Without ANTHROPIC_API_KEY sessions still accept messages, then every turn fails after its
retries; say so before the first session does."""

from django.conf import settings
from django.core import checks

DEFAULT_BASE_URL = "https://api.anthropic.com"


@checks.register("model_upstream")
def model_upstream_configured(app_configs=None, **kwargs):
    if settings.ANTHROPIC_API_KEY:
        return []
    where = (
        "the default upstream (https://api.anthropic.com)"
        if settings.ANTHROPIC_BASE_URL.rstrip("/") == DEFAULT_BASE_URL
        else f"ANTHROPIC_BASE_URL={settings.ANTHROPIC_BASE_URL}"
    )
    return [
        checks.Warning(
            f"The model upstream is not configured: ANTHROPIC_API_KEY is unset, so every session turn "
            f"sent to {where} will fail (401) after its retries.",
            hint="Set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for a gateway or another Messages API "
            "server), then restart.",
            id="mango.W001",
        )
    ]
