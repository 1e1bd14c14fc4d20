"""Writes: endpoints (create, update, rotate, delete), the outbox (webhook_event_emit, called in
the transaction of the change it reports), and the delivery log (claims under a lease, attempts
recorded by the lease holder only)."""

import base64
import secrets as random_secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core import outbound
from core import secrets as sealed
from core.errors import InvalidRequest
from core.ids import new_id
from webhooks.events import TYPES, event_body, new_event_id
from webhooks.interest import workspace_subscribed_forget, workspace_subscribed_mark
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from webhooks.selectors import endpoint_get
from webhooks.wakeup import wake_loop_elsewhere, wake_running_loop

EXCERPT_CHARS = 1024
ERROR_CHARS = 512


def _new_secret() -> str:
    """A Standard Webhooks signing secret: whsec_ and 32 random bytes, base64."""
    return "whsec_" + base64.b64encode(random_secrets.token_bytes(32)).decode()


def _check_url(url: str) -> None:
    try:
        outbound.check_url(url)
    except outbound.OutboundRefused as exc:
        raise InvalidRequest(f"url: {exc.for_client()}") from exc


def _check_types(event_types: list[str]) -> list[str]:
    unknown = sorted(set(event_types) - TYPES)
    if unknown:
        raise InvalidRequest(f"event_types: unknown types {unknown}; known: {sorted(TYPES)}")
    return sorted(set(event_types))


@transaction.atomic
def endpoint_create(
    *, workspace, url: str, event_types: list[str] | None = None, description: str = ""
) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its signing secret, returned once (stored only encrypted). At most
    MANGO_WEBHOOK_ENDPOINTS_MAX per workspace (counted under the workspace's row lock)."""
    _check_url(url)
    types = _check_types(event_types or [])
    type(workspace).objects.select_for_update().filter(pk=workspace.pk).first()
    if WebhookEndpoint.objects.filter(workspace=workspace).count() >= settings.MANGO_WEBHOOK_ENDPOINTS_MAX:
        raise InvalidRequest(
            f"A workspace has at most {settings.MANGO_WEBHOOK_ENDPOINTS_MAX} webhook endpoints "
            "(MANGO_WEBHOOK_ENDPOINTS_MAX)."
        )
    secret = _new_secret()
    now = timezone.now()
    endpoint = WebhookEndpoint.objects.create(
        workspace=workspace,
        url=url,
        event_types=types,
        description=description,
        secret=sealed.encrypt(secret),
        created_at=now,
        updated_at=now,
    )
    workspace_subscribed_mark(workspace_id=workspace.pk)
    return endpoint, secret


def endpoint_create_for_workspace_name(
    *, workspace_name: str, url: str, event_types: list[str] | None = None
) -> tuple[WebhookEndpoint, str]:
    """For the operator's command: the workspace is created if missing (as create_api_key does)."""
    from core.models import Workspace

    workspace, _ = Workspace.objects.get_or_create(name=workspace_name)
    return endpoint_create(workspace=workspace, url=url, event_types=event_types)


@transaction.atomic
def endpoint_update(*, workspace, endpoint_id: str, changes: dict) -> WebhookEndpoint:
    """`changes` may hold url, event_types, description, disabled (true disables, false enables
    and clears the reason)."""
    endpoint = endpoint_get(workspace=workspace, endpoint_id=endpoint_id, for_update=True)
    fields = []
    if "url" in changes:
        _check_url(changes["url"])
        endpoint.url = changes["url"]
        fields.append("url")
    if "event_types" in changes:
        endpoint.event_types = _check_types(changes["event_types"] or [])
        fields.append("event_types")
    if "description" in changes:
        endpoint.description = changes["description"]
        fields.append("description")
    if "disabled" in changes:
        if changes["disabled"] and endpoint.disabled_at is None:
            endpoint.disabled_at, endpoint.disabled_reason = timezone.now(), "disabled through the API"
        elif not changes["disabled"]:
            endpoint.disabled_at, endpoint.disabled_reason = None, ""
        fields += ["disabled_at", "disabled_reason"]
        _subscription_changed(workspace_id=endpoint.workspace_id, enabled=not changes["disabled"])
    endpoint.updated_at = timezone.now()
    endpoint.save(update_fields=[*fields, "updated_at"])
    return endpoint


@transaction.atomic
def endpoint_secret_rotate(
    *, workspace, endpoint_id: str, overlap_seconds: int | None = None
) -> tuple[WebhookEndpoint, str]:
    """A new signing secret, returned once. The old one keeps signing (beside the new: both
    signatures in `webhook-signature`) for `overlap_seconds` (MANGO_WEBHOOK_SECRET_OVERLAP_SECONDS)."""
    endpoint = endpoint_get(workspace=workspace, endpoint_id=endpoint_id, for_update=True)
    overlap = settings.MANGO_WEBHOOK_SECRET_OVERLAP_SECONDS if overlap_seconds is None else overlap_seconds
    secret = _new_secret()
    now = timezone.now()
    endpoint.previous_secret = endpoint.secret if overlap > 0 else ""
    endpoint.previous_secret_expires_at = now + timedelta(seconds=overlap) if overlap > 0 else None
    endpoint.secret = sealed.encrypt(secret)
    endpoint.updated_at = now
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at", "updated_at"])
    return endpoint, secret


@transaction.atomic
def endpoint_delete(*, workspace, endpoint_id: str) -> None:
    """The endpoint and its delivery log go (a lease holder's late record then matches nothing).
    Its pending deliveries are locked first: a worker recording an attempt holds its delivery's
    row lock while it inserts the attempt, which the cascade's earlier read of the attempts
    would miss (an attempt referencing a deleted delivery, refused at commit)."""
    endpoint = endpoint_get(workspace=workspace, endpoint_id=endpoint_id, for_update=True)
    list(
        WebhookDelivery.objects.select_for_update()
        .filter(endpoint=endpoint, status=WebhookDelivery.Status.PENDING)
        .values_list("id", flat=True)
    )
    endpoint.delete()
    workspace_subscribed_forget(workspace_id=workspace.pk)


def _subscription_changed(*, workspace_id: str, enabled: bool) -> None:
    """webhooks.interest: an enabled endpoint is known before commit, a disabled one after."""
    if enabled:
        workspace_subscribed_mark(workspace_id=workspace_id)
    else:
        workspace_subscribed_forget(workspace_id=workspace_id)


@transaction.atomic
def endpoints_set_disabled(*, endpoint_ids: list[str], disabled: bool, reason: str = "") -> int:
    """The admin's disable and enable of several endpoints (any workspace's)."""
    rows = WebhookEndpoint.objects.filter(id__in=endpoint_ids)
    now = timezone.now()
    if disabled:
        rows = rows.filter(disabled_at__isnull=True)
    workspaces = set(rows.values_list("workspace_id", flat=True))
    count = rows.update(disabled_at=now if disabled else None, disabled_reason=reason, updated_at=now)
    for workspace_id in workspaces:
        _subscription_changed(workspace_id=workspace_id, enabled=not disabled)
    return count


# The outbox's writes, in SQL: they run in the transaction of every change a subscribed workspace
# makes (a session's turn writes six events), and composing ten model instances per event for
# bulk_create was three quarters of an event's CPU in the turn's process.
_SUBSCRIBED = """
SELECT id FROM {endpoints}
WHERE workspace_id = %(workspace_id)s AND disabled_at IS NULL
  AND (event_types = '[]'::jsonb OR jsonb_exists(event_types, %(type)s))
"""

_OUTBOX = """
INSERT INTO {table} (id, workspace_id, endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at,
                     lease_token, last_error, created_at)
SELECT delivery.id, %(workspace_id)s, delivery.endpoint_id, %(event_id)s, %(type)s, %(body)s, 'pending', 0, %(now)s,
       '', '', %(now)s
FROM unnest(%(ids)s::text[], %(endpoint_ids)s::text[]) AS delivery(id, endpoint_id)
"""


def webhook_event_emit(
    *, workspace_id: str, type: str, object_id: str, created_at: datetime | None = None, extra: dict | None = None
) -> int:
    """One outbox row per enabled endpoint of the workspace that subscribes to `type`, written in
    the caller's transaction (the caller's change and its webhook commit or roll back together),
    and a delivery run asked for after commit. Returns the rows written."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SUBSCRIBED.format(endpoints=connection.ops.quote_name(WebhookEndpoint._meta.db_table)),
            {"workspace_id": workspace_id, "type": type},
        )
        wanted = [row[0] for row in cursor.fetchall()]
        if not wanted:
            return 0
        now = timezone.now()
        event_id = new_event_id()
        body = event_body(
            event_id=event_id,
            type=type,
            created_at=created_at or now,
            object_id=object_id,
            workspace_id=workspace_id,
            extra=extra,
        )
        cursor.execute(
            _OUTBOX.format(table=connection.ops.quote_name(WebhookDelivery._meta.db_table)),
            {
                "ids": [WebhookDelivery._meta.pk.default() for _ in wanted],
                "endpoint_ids": wanted,
                "workspace_id": workspace_id,
                "event_id": event_id,
                "type": type,
                "body": body,
                "now": now,
            },
        )
    transaction.on_commit(kick)
    return len(wanted)


def kick() -> None:
    """Ask for delivery now: this process's delivery loop if it is running, else one running in
    another process (webhooks.wakeup: no task either way), else a worker's (deliver_due_send).
    Beat's webhooks.deliver_due finds the rows anyway."""
    if not wake_running_loop() and not wake_loop_elsewhere():
        deliver_due_send()


def deliver_due_send() -> None:
    """A webhooks.deliver_due task, to the worker that consumes MANGO_WEBHOOKS_QUEUE."""
    try:
        current_app.send_task("webhooks.deliver_due")
    except (kombu.exceptions.OperationalError, redis.RedisError, OSError):
        pass  # the broker is down: beat's next run delivers them


_WORKSPACES_DUE = """
WITH RECURSIVE pending(workspace_id) AS (
    (SELECT workspace_id FROM {table} WHERE status = 'pending' ORDER BY workspace_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.workspace_id FROM {table} d
            WHERE d.status = 'pending' AND d.workspace_id > pending.workspace_id
            ORDER BY d.workspace_id LIMIT 1)
    FROM pending WHERE pending.workspace_id IS NOT NULL
)
SELECT pending.workspace_id FROM pending CROSS JOIN LATERAL (
    SELECT d.next_attempt_at FROM {table} d
    WHERE d.status = 'pending' AND d.workspace_id = pending.workspace_id AND d.next_attempt_at <= %(now)s
      AND (d.lease_until IS NULL OR d.lease_until <= %(now)s)
    ORDER BY d.workspace_id, d.next_attempt_at LIMIT 1
) oldest
WHERE pending.workspace_id IS NOT NULL AND NOT (pending.workspace_id = ANY(%(capped)s))
ORDER BY oldest.next_attempt_at LIMIT %(limit)s
"""


def _workspaces_due(*, now: datetime, capped: list[str], limit: int) -> list[str]:
    """Up to `limit` workspaces with due rows, not in `capped`, by their oldest due row. A skip
    over the whdl_workspace_due index (each workspace with pending rows, then its oldest due one),
    so a claim costs the database per workspace, not per row of the backlog (ordered as that index
    is, so the planner walks no other index past other tenants' rows): a GROUP BY over the due
    rows took ~2.5 ms of its CPU per claim with 6,000 pending, at a claim per delivery."""
    with connection.cursor() as cursor:
        cursor.execute(
            _WORKSPACES_DUE.format(table=connection.ops.quote_name(WebhookDelivery._meta.db_table)),
            {"now": now, "capped": capped, "limit": limit},
        )
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True)
class Lease:
    """A delivery leased to one claim, with what its attempt needs (the stored body, the
    endpoint's URL and the secrets that sign now, or why nothing is sent: the endpoint disabled,
    its secrets unreadable) and what its record checks (the claim's token, the attempts made
    before it)."""

    delivery_id: str
    token: str
    endpoint_id: str
    attempts: int
    created_at: datetime
    body: str
    url: str
    secrets: tuple[str, ...] = field(repr=False)
    refused: str = ""


# A claim's statements are written in SQL, not through the ORM: a delivery loop claims every few
# milliseconds under load, in the same process as the turns it shares the GIL with, and composing
# these queries in the ORM cost more of the worker's CPU than the deliveries' POSTs did.
_IN_FLIGHT = """
SELECT workspace_id, count(*) FROM {table} WHERE status = 'pending' AND lease_until > %(now)s GROUP BY workspace_id
"""

_TAKE = """
SELECT id FROM {table}
WHERE status = 'pending' AND workspace_id = %(workspace_id)s AND next_attempt_at <= %(now)s
  AND (lease_until IS NULL OR lease_until <= %(now)s)
ORDER BY workspace_id, next_attempt_at LIMIT %(share)s FOR UPDATE SKIP LOCKED
"""

_LEASE = """
UPDATE {table} AS d SET lease_token = %(token)s, lease_until = %(until)s
FROM {endpoints} AS e WHERE d.id = ANY(%(ids)s) AND e.id = d.endpoint_id
RETURNING d.id, d.endpoint_id, d.attempts, d.created_at, d.body,
          e.url, e.disabled_at, e.disabled_reason, e.secret, e.previous_secret, e.previous_secret_expires_at
"""


def deliveries_claim(*, limit: int, threads: int | None = None) -> list[Lease]:
    """Due deliveries leased to the caller, shared fairly between workspaces. Per workspace no
    more than MANGO_WEBHOOK_INFLIGHT_MAX are leased at once over the fleet (and never all of a
    run's `threads`: one is always left for the others). The workspaces under their cap that
    have due rows are served in the order of their oldest due row, each a share of `limit`
    (rows taken with SKIP LOCKED, oldest first), so one tenant's backlog of failing retries,
    however old and however long, takes no other tenant's turn. One lease token for the rows of
    one claim, written by one UPDATE that returns what the attempts need."""
    now = timezone.now()
    cap = settings.MANGO_WEBHOOK_INFLIGHT_MAX
    if threads is not None:
        cap = max(1, min(cap, threads - 1))
    table = connection.ops.quote_name(WebhookDelivery._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_IN_FLIGHT.format(table=table), {"now": now})
        in_flight = dict(cursor.fetchall())
        capped = [workspace_id for workspace_id, n in in_flight.items() if n >= cap]
        queue = _workspaces_due(now=now, capped=capped, limit=limit)
        taken: list[str] = []
        for position, workspace_id in enumerate(queue):
            fair = -(-(limit - len(taken)) // (len(queue) - position))  # ceil: the rest, shared
            share = min(cap - in_flight.get(workspace_id, 0), fair)
            cursor.execute(_TAKE.format(table=table), {"workspace_id": workspace_id, "now": now, "share": share})
            taken += [row[0] for row in cursor.fetchall()]
        if not taken:
            return []
        token = new_id("lease")
        until = now + timedelta(seconds=settings.MANGO_WEBHOOK_LEASE_SECONDS)
        endpoints = connection.ops.quote_name(WebhookEndpoint._meta.db_table)
        cursor.execute(_LEASE.format(table=table, endpoints=endpoints), {"token": token, "until": until, "ids": taken})
        rows = cursor.fetchall()
    keys = _SigningKeys(now)
    leased = {row[0]: _lease(row, token=token, keys=keys) for row in rows}
    return [leased[delivery_id] for delivery_id in taken]


def _lease(row: tuple, *, token: str, keys: "_SigningKeys") -> Lease:
    delivery_id, endpoint_id, attempts, created_at, body, url, disabled_at, disabled_reason, *stored = row
    secrets, refused = (), ""
    if disabled_at is not None:
        refused = f"the endpoint is disabled: {disabled_reason}"
    else:
        try:
            secrets = keys.signing(*stored)
        except sealed.SecretsUnavailable as exc:
            refused = str(exc)
    return Lease(delivery_id, token, endpoint_id, attempts, created_at, body, url, secrets, refused)


def retry_delay(attempts: int) -> timedelta:
    """After the Nth failed attempt: base * 2**(N-1), at most MANGO_WEBHOOK_RETRY_MAX_DELAY_SECONDS."""
    base = settings.MANGO_WEBHOOK_RETRY_BASE_SECONDS
    return timedelta(seconds=min(base * 2 ** min(attempts - 1, 40), settings.MANGO_WEBHOOK_RETRY_MAX_DELAY_SECONDS))


@dataclass(frozen=True)
class Outcome:
    """What one attempt of a leased delivery got, as its sender read it."""

    lease: Lease
    started_at: datetime
    latency_ms: int
    status_code: int | None
    error: str = ""
    response_excerpt: str = ""


_RECORD = """
UPDATE {table} AS d SET
    attempts = v.number, last_status_code = v.status_code, last_error = v.error, lease_token = '',
    lease_until = NULL, status = v.status, delivered_at = COALESCE(v.delivered_at, d.delivered_at),
    next_attempt_at = COALESCE(v.next_attempt_at, d.next_attempt_at)
FROM unnest(%(ids)s::text[], %(tokens)s::text[], %(numbers)s::int[], %(statuses)s::text[], %(codes)s::int[],
            %(errors)s::text[], %(delivered)s::timestamptz[], %(next)s::timestamptz[])
    AS v(id, token, number, status, status_code, error, delivered_at, next_attempt_at)
WHERE d.id = v.id AND d.lease_token = v.token AND d.status = 'pending' AND d.attempts = v.number - 1
RETURNING d.id
"""

_ATTEMPTS = """
INSERT INTO {table} (id, delivery_id, number, started_at, latency_ms, status_code, error, response_excerpt)
SELECT * FROM unnest(%(ids)s::text[], %(deliveries)s::text[], %(numbers)s::int[], %(started)s::timestamptz[],
                     %(latencies)s::int[], %(codes)s::int[], %(errors)s::text[], %(excerpts)s::text[])
"""


def _fate(outcome: Outcome, *, now: datetime) -> tuple[str, datetime | None, datetime | None]:
    """(status, delivered_at, next_attempt_at) after `outcome`: a 2xx ends the delivery; anything
    else schedules the next attempt, until MANGO_WEBHOOK_RETRY_SECONDS since the event."""
    if outcome.status_code is not None and 200 <= outcome.status_code < 300:
        return WebhookDelivery.Status.SUCCEEDED, now, None
    if now - outcome.lease.created_at >= timedelta(seconds=settings.MANGO_WEBHOOK_RETRY_SECONDS):
        return WebhookDelivery.Status.FAILED, None, None
    return WebhookDelivery.Status.PENDING, None, now + retry_delay(outcome.lease.attempts + 1)


def deliveries_record(*, outcomes: list[Outcome]) -> set[str]:
    """The outcomes of attempts, each recorded only while its sender's lease holds the row (a
    late holder whose lease was taken over, or whose delivery was replayed, records nothing): one
    conditional UPDATE for them all, which holds the rows' locks while their attempts are
    inserted (endpoint_delete), in one transaction. A 2xx ends a delivery; anything else
    schedules its next attempt with exponential backoff until MANGO_WEBHOOK_RETRY_SECONDS have
    passed since the event, then the delivery fails; an endpoint whose deliveries have failed
    for that long is disabled, saying why. Returns the ids of the deliveries recorded."""
    if not outcomes:
        return set()
    now = timezone.now()
    fates = [_fate(outcome, now=now) for outcome in outcomes]
    table = connection.ops.quote_name(WebhookDelivery._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _RECORD.format(table=table),
            {
                "ids": [outcome.lease.delivery_id for outcome in outcomes],
                "tokens": [outcome.lease.token for outcome in outcomes],
                "numbers": [outcome.lease.attempts + 1 for outcome in outcomes],
                "statuses": [status for status, _, _ in fates],
                "codes": [outcome.status_code for outcome in outcomes],
                "errors": [outcome.error[:ERROR_CHARS] for outcome in outcomes],
                "delivered": [delivered for _, delivered, _ in fates],
                "next": [next_at for _, _, next_at in fates],
            },
        )
        recorded = {row[0] for row in cursor.fetchall()}
        kept = [outcome for outcome in outcomes if outcome.lease.delivery_id in recorded]
        if kept:
            cursor.execute(
                _ATTEMPTS.format(table=connection.ops.quote_name(WebhookAttempt._meta.db_table)),
                {
                    "ids": [WebhookAttempt._meta.pk.default() for _ in kept],
                    "deliveries": [outcome.lease.delivery_id for outcome in kept],
                    "numbers": [outcome.lease.attempts + 1 for outcome in kept],
                    "started": [outcome.started_at for outcome in kept],
                    "latencies": [outcome.latency_ms for outcome in kept],
                    "codes": [outcome.status_code for outcome in kept],
                    "errors": [outcome.error[:ERROR_CHARS] for outcome in kept],
                    "excerpts": [outcome.response_excerpt[:EXCERPT_CHARS] for outcome in kept],
                },
            )
        failing = {
            outcome.lease.endpoint_id
            for outcome, (status, _, _) in zip(outcomes, fates, strict=True)
            if status == WebhookDelivery.Status.FAILED and outcome.lease.delivery_id in recorded
        }
        for endpoint_id in sorted(failing):
            _disable_if_failing(endpoint_id=endpoint_id, now=now)
    return recorded


def _disable_if_failing(*, endpoint_id: str, now: datetime) -> None:
    """Disabled when nothing succeeded within the retry window (and something failed in it)."""
    since = now - timedelta(seconds=settings.MANGO_WEBHOOK_RETRY_SECONDS)
    if WebhookDelivery.objects.filter(
        endpoint_id=endpoint_id, status=WebhookDelivery.Status.SUCCEEDED, delivered_at__gte=since
    ).exists():
        return
    workspace_id = WebhookEndpoint.objects.filter(id=endpoint_id).values_list("workspace_id", flat=True).first()
    if workspace_id is not None:
        workspace_subscribed_forget(workspace_id=workspace_id)
    WebhookEndpoint.objects.filter(id=endpoint_id, disabled_at__isnull=True).update(
        disabled_at=now,
        disabled_reason=(
            f"every delivery failed for {settings.MANGO_WEBHOOK_RETRY_SECONDS // 3600} h "
            "(MANGO_WEBHOOK_RETRY_SECONDS); enable it again once the receiver answers 2xx"
        ),
        updated_at=now,
    )


def deliveries_replay(
    *, workspace, endpoint_id: str, delivery_id: str | None = None, created_at_gte=None, created_at_lt=None
) -> int:
    """Deliver again (same webhook-id and body): one delivery, or every one of the endpoint
    created in [created_at_gte, created_at_lt). Returns how many were scheduled."""
    endpoint_get(workspace=workspace, endpoint_id=endpoint_id)
    rows = WebhookDelivery.objects.filter(workspace=workspace, endpoint_id=endpoint_id)
    if delivery_id is not None:
        rows = rows.filter(id=delivery_id)
    if created_at_gte is not None:
        rows = rows.filter(created_at__gte=created_at_gte)
    if created_at_lt is not None:
        rows = rows.filter(created_at__lt=created_at_lt)
    with transaction.atomic():
        count = rows.update(
            status=WebhookDelivery.Status.PENDING, next_attempt_at=timezone.now(), lease_token="", lease_until=None
        )
        if count:
            transaction.on_commit(kick)
    return count


class _SigningKeys:
    """The secrets that sign now (the worker only, right before its attempts): an endpoint's
    current one, and its previous one during the rotation's overlap window; each stored secret
    decrypted once per claim, however many of its deliveries the claim leased."""

    def __init__(self, now: datetime):
        self._now = now
        self._plain: dict[str, str] = {}

    def _decrypt(self, token: str) -> str:
        if token not in self._plain:
            self._plain[token] = sealed.decrypt(token)
        return self._plain[token]

    def signing(self, secret: str, previous: str, previous_expires_at: datetime | None) -> tuple[str, ...]:
        if previous and previous_expires_at and previous_expires_at > self._now:
            return self._decrypt(secret), self._decrypt(previous)
        return (self._decrypt(secret),)
