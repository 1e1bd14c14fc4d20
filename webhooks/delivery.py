"""One attempt of one leased delivery: sign the stored body with standardwebhooks (every secret that
signs now: `webhook-signature` carries one `v1,…` per secret), POST it through the outbound
guard (core/transports.GuardedTransport: the endpoint's host is resolved and checked, private
addresses refused unless in MANGO_OUTBOUND_PRIVATE_HOSTS, redirects not followed), within
MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS to connect and MANGO_WEBHOOK_TIMEOUT_SECONDS in all,
reading at most MANGO_WEBHOOK_RESPONSE_MAX_BYTES of the answer; its outcome goes back to the
delivery loop (webhooks.tasks), which records the outcomes of its attempts together."""

import functools
import ssl
import time
from datetime import UTC, datetime

import httpx2
from django.conf import settings
from standardwebhooks import Webhook

from core.crashpoints import crash_point
from core.outbound import OutboundRefused
from core.transports import GuardedTransport, ResponseRefused
from webhooks.services import EXCERPT_CHARS, Lease, Outcome

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


def delivery_attempt(*, lease: Lease) -> Outcome:
    """One attempt: no database connection is held while the endpoint answers (up to the
    timeout); the outcome is recorded by the caller (webhooks.services.deliveries_record)."""
    started = datetime.now(UTC)
    clock = time.monotonic()
    status_code, error, excerpt = None, lease.refused, ""
    if not error:
        try:
            headers = signed_headers(
                delivery_id=lease.delivery_id, body=lease.body, secrets=list(lease.secrets), now=started
            )
            status_code, excerpt = _post(lease.url, lease.body.encode(), headers)
            crash_point("webhooks.after_post")  # sent, not yet recorded: the crash tests stop here
            if status_code >= 300:
                error = f"the endpoint answered {status_code}"
        except OutboundRefused as exc:
            error = exc.for_client() if exc.private else str(exc)
        except httpx2.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Outcome(
        lease=lease,
        started_at=started,
        latency_ms=int((time.monotonic() - clock) * 1000),
        status_code=status_code,
        error=error,
        response_excerpt=excerpt,
    )
