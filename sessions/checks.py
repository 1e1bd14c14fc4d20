"""The start-up check of the model upstream (`manage.py check --deploy --tag model_upstream`, run
once by `make run`, which prints it under its banner; a deployment check, so other commands do not
repeat it).

It says before the first session does what every turn would then report, in the turn's own words
(sessions/runtime/upstream.py): an upstream that cannot be reached, or the real API without a key."""

import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

from sessions.runtime import upstream

DEFAULT_BASE_URL = "https://api.anthropic.com"
HINT = (
    "Set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for a gateway or another Messages API server), or try "
    "sessions offline against the scripted upstream: make scripted-model, then "
    'ANTHROPIC_BASE_URL=http://127.0.0.1:8099 make run (README, "The model").'
)


def _unreachable(url: str) -> str | None:
    """Why a TCP connection to the upstream fails (None when it connects)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=3).close()
    except OSError as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


@checks.register("model_upstream", deploy=True)
def model_upstream_configured(app_configs=None, **kwargs):
    reason = _unreachable(settings.ANTHROPIC_BASE_URL)
    if reason is not None:
        problem = f"every session turn will fail after its retries with: {upstream.unreachable_message(reason)}"
    elif not settings.ANTHROPIC_API_KEY and upstream.upstream_url() == DEFAULT_BASE_URL:
        problem = (
            f"ANTHROPIC_API_KEY is unset, so every session turn will fail with: {upstream.rejected_key_message(401)}"
        )
    else:
        return []
    return [checks.Warning(f"The model upstream is not usable: {problem}", hint=HINT, id="mango.W001")]
