"""Small helpers shared by every API module: header parsing and query-parameter readers that
understand the SDK's bracketed arrays (api-contract.md §0)."""

from django.conf import settings

from core.errors import InvalidRequest


def beta_values(request) -> set[str]:
    """The `anthropic-beta` values: comma-separated, possibly over several headers (WSGI joins
    repeated headers with commas)."""
    raw = request.META.get("HTTP_ANTHROPIC_BETA", "")
    return {value.strip() for value in raw.split(",") if value.strip()}


def require_beta_in_strict_mode(request, beta: str) -> None:
    if settings.MANGO_STRICT and beta not in beta_values(request):
        raise InvalidRequest(
            f"Missing required header: anthropic-beta must include {beta!r} (strict mode is on).",
        )


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
        raise InvalidRequest(f"{name}: must be an integer, got {raw!r}.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidRequest(f"{name}: must be between {minimum} and {maximum}, got {value}.")
    return value


def query_bool(request, name: str, *, default: bool = False) -> bool:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise InvalidRequest(f"{name}: must be true or false, got {raw!r}.")
