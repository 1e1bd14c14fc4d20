"""Opaque `page_…` cursors for keyset pagination (api-contract.md §8)."""

import base64
import json

from core.errors import InvalidRequest


def cursor_encode(data: dict) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(value: str | None) -> dict | None:
    if not value:
        return None
    if not value.startswith("page_"):
        raise InvalidRequest("page: not a cursor returned by this server.")
    body = value[len("page_") :]
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        raise InvalidRequest("page: not a cursor returned by this server.")
    if not isinstance(data, dict):
        raise InvalidRequest("page: not a cursor returned by this server.")
    return data


def keyset_page(
    queryset, *, key: str, descending: bool, limit: int, page: str | None
) -> tuple[list, str | None, str | None]:
    """One page of `queryset` ordered by the unique `key`. Returns (rows, next_page, prev_page).

    A cursor is {"k": key value, "d": "n"|"p"}: rows strictly after (next) or before (prev) it
    in the listing order."""
    cursor = cursor_decode(page)
    forward_lookup = "lt" if descending else "gt"
    backward_lookup = "gt" if descending else "lt"
    order = f"-{key}" if descending else key
    reverse_order = key if descending else f"-{key}"
    if cursor is None:
        rows = list(queryset.order_by(order)[: limit + 1])
        has_more, has_before = len(rows) > limit, False
        rows = rows[:limit]
    elif cursor.get("d") == "p":
        rows = list(
            queryset.filter(**{f"{key}__{backward_lookup}": cursor.get("k")}).order_by(reverse_order)[: limit + 1]
        )
        has_before = len(rows) > limit
        rows = list(reversed(rows[:limit]))
        has_more = True
    else:
        rows = list(queryset.filter(**{f"{key}__{forward_lookup}": cursor.get("k")}).order_by(order)[: limit + 1])
        has_more, has_before = len(rows) > limit, True
        rows = rows[:limit]
    next_page = cursor_encode({"k": getattr(rows[-1], key), "d": "n"}) if rows and has_more else None
    prev_page = cursor_encode({"k": getattr(rows[0], key), "d": "p"}) if rows and has_before else None
    return rows, next_page, prev_page
