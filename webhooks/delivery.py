"""One attempt of one delivery: sign the stored body with standardwebhooks (every secret that
signs now: `webhook-signature` carries one `v1,…` per secret), POST it through the outbound
guard (core/transports.GuardedTransport: the endpoint's host is resolved and checked, private
addresses refused unless in MANGO_OUTBOUND_PRIVATE_HOSTS, redirects not followed), within
MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS to connect and MANGO_WEBHOOK_TIMEOUT_SECONDS in all,
reading at most MANGO_WEBHOOK_RESPONSE_MAX_BYTES of the answer, then record the outcome."""

import functools
import ssl
import time
from datetime import UTC, datetime

import httpx2
from django.conf import settings
from django.db import connection
from standardwebhooks import Webhook

from core.crashpoints import crash_point
from core.outbound import OutboundRefused
from core.secrets import SecretsUnavailable
from core.transports import GuardedTransport, ResponseRefused
from webhooks.models import WebhookDelivery
from webhooks.services import EXCERPT_CHARS, delivery_attempt_record, endpoint_signing_secrets

USER_AGENT = "Mango-Webhooks/1"


def signed_headers(*, delivery_id: str, body: str, secrets: list[str], now: datetime) -> dict[str, str]:
    signatures = " ".join(Webhook(secret).sign(delivery_id, now, body) for secret in secrets)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signatures,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process for every delivery (building one loads the CA bundle: ~20 ms
    of CPU, which bounded a worker at a few dozen deliveries a second); SSLContext is shared
    across threads safely, each connection still verifies its endpoint's certificate."""
    return httpx2.create_ssl_context(verify=True)


def _post(url: str, body: bytes, headers: dict) -> tuple[int, str]:
    total = settings.MANGO_WEBHOOK_TIMEOUT_SECONDS
    limit = settings.MANGO_WEBHOOK_RESPONSE_MAX_BYTES
    timeout = httpx2.Timeout(total, connect=settings.MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS)
    transport = GuardedTransport(verify=_tls(), total_timeout=total, max_response_bytes=limit)
    client = httpx2.Client(transport=transport, timeout=timeout, follow_redirects=False)
    with client, client.stream("POST", url, content=body, headers=headers) as response:
        read = bytearray()
        try:
            for chunk in response.iter_bytes():
                read += chunk
                if len(read) >= EXCERPT_CHARS * 4:
                    break
        except ResponseRefused:
            pass
        return response.status_code, bytes(read).decode("utf-8", "replace")[:EXCERPT_CHARS]


def delivery_attempt(*, delivery_id: str, lease_token: str) -> None:
    delivery = (
        WebhookDelivery.objects.select_related("endpoint").filter(id=delivery_id, lease_token=lease_token).first()
    )
    if delivery is None:
        return
    started = datetime.now(UTC)
    clock = time.monotonic()
    status_code, error, excerpt = None, "", ""
    try:
        if delivery.endpoint.disabled_at is not None:
            raise OutboundRefused(f"the endpoint is disabled: {delivery.endpoint.disabled_reason}")
        headers = signed_headers(
            delivery_id=delivery.id,
            body=delivery.body,
            secrets=endpoint_signing_secrets(endpoint=delivery.endpoint),
            now=started,
        )
        connection.close()  # no pooled connection held while the endpoint answers (up to the timeout)
        status_code, excerpt = _post(delivery.endpoint.url, delivery.body.encode(), headers)
        crash_point("webhooks.after_post")  # sent, not yet recorded: the crash tests stop here
        if status_code >= 300:
            error = f"the endpoint answered {status_code}"
    except OutboundRefused as exc:
        error = exc.for_client() if exc.private else str(exc)
    except SecretsUnavailable as exc:
        error = str(exc)
    except httpx2.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    delivery_attempt_record(
        delivery=delivery,
        lease_token=lease_token,
        started_at=started,
        latency_ms=int((time.monotonic() - clock) * 1000),
        status_code=status_code,
        error=error,
        response_excerpt=excerpt,
    )
