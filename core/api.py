"""Small helpers shared by every API module: header parsing and query-parameter readers that
understand the SDK's bracketed arrays (api-contract.md §0), and the API's one timestamp format."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils.dateparse import parse_datetime
from rest_framework.negotiation import BaseContentNegotiation

from core.errors import InvalidRequest
from core.schema import list_parameters


def beta_values(meta: Mapping[str, str]) -> set[str]:
    """The `anthropic-beta` values of a request's META (a WSGI environ, or the ASGI endpoints'
    meta): comma-separated, possibly over several headers (WSGI joins them with commas)."""
    raw = meta.get("HTTP_ANTHROPIC_BETA", "")
    return {value.strip() for value in raw.split(",") if value.strip()}


def require_beta(meta: Mapping[str, str], *betas: str) -> None:
    """The one beta-header rule (api-contract.md §0): in strict mode a request must name one of
    `betas` in anthropic-beta; otherwise the header is not required."""
    if settings.MANGO_STRICT and not beta_values(meta) & set(betas):
        wanted = " or ".join(repr(beta) for beta in betas)
        raise InvalidRequest(f"Missing required header: anthropic-beta must include {wanted} (strict mode is on).")


def query_list(request, name: str) -> list[str]:
    """An array query parameter in either form: `name[]=a&name[]=b` (the SDK) or `name=a&name=b`."""
    return request.query_params.getlist(f"{name}[]") + request.query_params.getlist(name)


def query_int(
    request, name: str, *, default: int | None = None, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"{name}: must be an integer, got {raw[:40]!r}.")
    # Integer query parameters map to 32-bit columns: the default bounds keep them there.
    minimum = -(2**31) if minimum is None else minimum
    maximum = 2**31 - 1 if maximum is None else maximum
    if not minimum <= value <= maximum:
        raise InvalidRequest(f"{name}: must be between {minimum} and {maximum}, got {str(value)[:40]}.")
    return value


def query_bool(request, name: str, *, default: bool = False) -> bool:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise InvalidRequest(f"{name}: must be true or false, got {raw[:40]!r}.")


def rfc3339(value: datetime | None) -> str | None:
    """Every timestamp the API renders: RFC 3339 in UTC with microseconds and a `Z`."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def query_datetime(request, name: str) -> datetime | None:
    """An RFC 3339 query parameter as an aware UTC datetime. Offsets outside ±24 h, and times that
    fall outside the representable range once moved to UTC, are 400s like any other bad value."""
    raw = request.query_params.get(name)
    if not raw:
        return None
    error = InvalidRequest(f"{name}: must be an RFC 3339 datetime.")
    if len(raw) > 64:
        raise error
    try:
        value = parse_datetime(raw.replace(" ", "+"))
        if value is None:
            raise error
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    except (ValueError, OverflowError):
        raise error


TIME_RANGE_OPERATORS = ("gt", "gte", "lt", "lte")


def query_time_range(request, prefix: str = "created_at") -> dict[str, datetime]:
    """The given bounds of `prefix[gt]`, `prefix[gte]`, `prefix[lt]`, `prefix[lte]`, as Django
    lookups ({"gte": datetime, ...}); absent bounds are left out."""
    bounds = {op: query_datetime(request, f"{prefix}[{op}]") for op in TIME_RANGE_OPERATORS}
    return {op: value for op, value in bounds.items() if value is not None}


@dataclass(frozen=True)
class Paging:
    """A list route's `limit` and `page` query parameters: the bounds the view enforces and the
    ones the OpenAPI document states come from one place. `default=None`: every row."""

    maximum: int
    default: int | None

    def parameters(self) -> list:
        return list_parameters(max_limit=self.maximum, default_limit=self.default)

    def read(self, request) -> dict:
        """`limit` and `page` as keyword arguments for a selector's keyset page."""
        limit = query_int(request, "limit", default=self.default, minimum=1, maximum=self.maximum)
        return {"limit": limit, "page": request.query_params.get("page")}


class IgnoreAccept(BaseContentNegotiation):
    """The SDK sends `Accept: application/binary` for downloads and `application/json` for
    everything else; responses have one fixed type, so Accept is not negotiated."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
