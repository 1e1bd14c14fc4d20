"""The API's one opaque `page_…` cursor (api-contract.md §8) and the keyset page built on it.

A cursor is `page_` + base64url(compact JSON payload) + `.` + its signature, made by
django.core.signing with the listing's `purpose` as the salt: a cursor is only accepted by the
listing that issued it (and, after a key rotation, under SECRET_KEY_FALLBACKS), and a hand-made or
edited one is a 400 — never a query built from client-chosen values. Decoded payloads are still
checked field by field.
"""

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.core import signing
from django.db.models import Func, IntegerField, TextField, Value
from django.db.models.functions import Cast, Coalesce

from core.errors import InvalidRequest

CURSOR_PREFIX = "page_"
MAX_CURSOR_CHARS = 512


def _signer(purpose: str) -> signing.Signer:
    return signing.Signer(salt=f"mango.cursor:{purpose}", sep=".")


def cursor_encode(payload: dict, *, purpose: str) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return CURSOR_PREFIX + _signer(purpose).sign(base64.urlsafe_b64encode(raw).decode().rstrip("="))


def cursor_decode(value: str, *, purpose: str, fields: dict[str, Callable[[object], bool]]) -> dict:
    """The payload of a cursor this server issued for `purpose`; a 400 for anything else.
    `fields` maps each payload key to a check of its value; every key must be present and pass."""
    error = InvalidRequest("page: unknown or malformed page cursor.")
    if not isinstance(value, str) or not value.startswith(CURSOR_PREFIX) or len(value) > MAX_CURSOR_CHARS:
        raise error
    try:
        token = _signer(purpose).unsign(value[len(CURSOR_PREFIX) :])
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (signing.BadSignature, ValueError, binascii.Error):
        raise error
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        raise error
    if not isinstance(payload, dict) or set(payload) != set(fields):
        raise error
    for key, check in fields.items():
        if not check(payload[key]):
            raise error
    return payload


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def is_id(value) -> bool:
    """An id-shaped string: what a keyset on a public id may hold."""
    return isinstance(value, str) and 0 < len(value) <= 128 and value.isascii() and value.isprintable()


def keyset_page(
    queryset,
    *,
    key: str,
    descending: bool,
    limit: int,
    page: str | None,
    purpose: str,
    integer_key: bool = False,
    size=None,
) -> tuple[list, str | None, str | None]:
    """One page of `queryset` ordered by the unique `key` (an id string, or an integer with
    `integer_key`). Returns (rows, next_page, prev_page). A cursor holds {"k": key value,
    "d": "n"|"p"}: rows strictly after (next) or before (prev) it in the listing order.

    `size` (a query expression: the bytes a row renders to, roughly) bounds the page's memory
    whatever `limit` is: rows are first listed as (key, size) only, and the page ends early,
    with a next_page, once MANGO_LIST_RESPONSE_MAX_BYTES is reached (always at least one row)."""
    key_check = is_int if integer_key else is_id
    cursor = (
        cursor_decode(page, purpose=purpose, fields={"k": key_check, "d": lambda d: d in ("n", "p")}) if page else None
    )
    backward = cursor is not None and cursor["d"] == "p"
    if cursor is not None:
        lookup = ("gt" if descending else "lt") if backward else ("lt" if descending else "gt")
        queryset = queryset.filter(**{f"{key}__{lookup}": cursor["k"]})
    order = f"-{key}" if descending != backward else key
    if size is None:
        rows = list(queryset.order_by(order)[: limit + 1])
        rows, overflow = rows[:limit], len(rows) > limit
    else:
        rows, overflow = _within_budget(queryset, key=key, order=order, limit=limit, size=size)
    if backward:
        rows.reverse()
        has_more, has_before = True, overflow
    else:
        has_more, has_before = overflow, cursor is not None
    next_page = cursor_encode({"k": getattr(rows[-1], key), "d": "n"}, purpose=purpose) if rows and has_more else None
    prev_page = cursor_encode({"k": getattr(rows[0], key), "d": "p"}, purpose=purpose) if rows and has_before else None
    return rows, next_page, prev_page


def _within_budget(queryset, *, key: str, order: str, limit: int, size) -> tuple[list, bool]:
    """The first rows in `order`, at most `limit`, whose sizes fit MANGO_LIST_RESPONSE_MAX_BYTES
    (at least one), fetched in full; and whether more rows follow."""
    budget = settings.MANGO_LIST_RESPONSE_MAX_BYTES
    sized = list(queryset.order_by(order).annotate(_size=size).values_list(key, "_size")[: limit + 1])
    keys, total = [], 0
    for row_key, row_size in sized[:limit]:
        total += row_size or 0
        if keys and total > budget:
            break
        keys.append(row_key)
    rows = list(queryset.filter(**{f"{key}__in": keys}).order_by(order)) if keys else []
    return rows, len(sized) > len(keys)


def rendered_bytes(*fields: str):
    """A size expression for keyset_page: the bytes of these columns as text (JSON columns
    included), nulls counting 0."""
    total = None
    for field in fields:
        length = Coalesce(
            Func(Cast(field, TextField()), function="octet_length", output_field=IntegerField()), Value(0)
        )
        total = length if total is None else total + length
    return total


def in_range(queryset, field: str, bounds: dict[str, datetime]):
    """Rows whose `field` is within the bounds of core.api.query_time_range."""
    return queryset.filter(**{f"{field}__{op}": value for op, value in bounds.items()})
