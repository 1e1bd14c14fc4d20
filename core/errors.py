"""One error hierarchy, rendered in one place (api-contract.md §2).

Views raise ApiError subclasses (or let DRF / Django raise theirs); `exception_handler` and
`error_response` turn every one of them into the envelope

    {"type": "error", "error": {"type", "message", "details"}, "request_id"}

The `request-id` header is added by core.middleware.RequestIdMiddleware on every response.
"""

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable

import kombu.exceptions
import psycopg
import redis
from django import db
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse
from psycopg_pool import PoolTimeout
from rest_framework import exceptions as drf_exceptions

from core.database import database_answers
from core.secrets import SecretsUnavailable

logger = logging.getLogger(__name__)

# Exceptions of the layers below the API that describe a client error, mapped by the app that
# knows them (e.g. files/apps.py maps processors' ProcessorError): core imports no app.
_mappers: list[tuple[type[Exception], Callable[[Exception], "ApiError"]]] = []


def register_mapping(exc_type: type[Exception], to_error: Callable[[Exception], "ApiError"]) -> None:
    """Render `exc_type` (and its subclasses) as the ApiError `to_error` returns. Idempotent."""
    if all(registered is not exc_type for registered, _ in _mappers):
        _mappers.append((exc_type, to_error))


class ApiError(Exception):
    status = 500
    type = "api_error"
    message = "Internal server error."
    code: str | None = None
    headers: dict[str, str] = {}

    def __init__(self, message: str | None = None, *, code: str | None = None, details=None, headers=None):
        super().__init__(message or self.message)
        self.message = message or self.message
        self.code = code or self.code
        self.details = dict(details or {})
        if self.code:
            self.details.setdefault("error_code", self.code)
        self.headers = {**self.headers, **(headers or {})}


class InvalidRequest(ApiError):
    status = 400
    type = "invalid_request_error"
    message = "Invalid request."


class AuthenticationFailed(ApiError):
    status = 401
    type = "authentication_error"
    message = "Invalid or missing API key."


class PermissionDenied(ApiError):
    status = 403
    type = "permission_error"
    message = "Permission denied."


class NotFound(ApiError):
    status = 404
    type = "not_found_error"
    message = "Not found."


class MethodNotAllowed(ApiError):
    status = 405
    type = "invalid_request_error"
    message = "Method not allowed."


class Conflict(ApiError):
    status = 409
    type = "conflict_error"
    message = "Conflict."
    # Conflicts here are deterministic: the SDK would otherwise retry 409s.
    headers = {"x-should-retry": "false"}


class RequestTimeout(ApiError):
    """The request body stopped arriving (MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS without a byte)."""

    status = 408
    type = "timeout_error"
    message = "The request body stopped arriving; nothing was stored."
    code = "request_body_timeout"


class RequestTooLarge(ApiError):
    status = 413
    type = "request_too_large"
    message = "Request body is too large."


class RateLimited(ApiError):
    status = 429
    type = "rate_limit_error"
    message = "Rate limited."


class ServiceUnavailable(ApiError):
    status = 503
    type = "api_error"
    message = "Service unavailable."


class DatabaseBusy(ServiceUnavailable):
    """No database connection came free within MANGO_DB_POOL_TIMEOUT_SECONDS, the database
    answering all along (every connection was in use)."""

    message = "The server is busy; retry shortly."
    headers = {"retry-after": "1"}


class DatabaseUnavailable(ServiceUnavailable):
    """The database did not answer (down, restarting, or this connection was terminated)."""

    message = "The database is unavailable; retry shortly."
    code = "database_unavailable"
    headers = {"retry-after": "2"}


class ObjectStoreUnavailable(ServiceUnavailable):
    """The object store did not answer (files/storage.py raises its subclass)."""

    message = "The object store is unavailable; nothing was changed. Retry later."
    code = "object_store_unavailable"
    headers = {"retry-after": "2"}


class QueueUnavailable(ServiceUnavailable):
    """The task queue (Redis) did not answer, and the request could not go ahead without it."""

    message = "The task queue is unavailable; retry shortly."
    code = "queue_unavailable"
    headers = {"retry-after": "2"}


# Exceptions that mean "the database did not answer", whichever layer raised them. Django wraps
# psycopg's in its own classes (django.db.utils), with the original as __cause__.
DATABASE_DOWN_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, db.OperationalError, db.InterfaceError)
QUEUE_DOWN_ERRORS = (kombu.exceptions.OperationalError, redis.ConnectionError, redis.TimeoutError)


_pool_checked_at = [0.0]


def _check_pool_soon() -> None:
    """A request met a dead database connection (the server restarted, or ended it): have the
    pool test its idle connections now, in the background, so the next requests get live ones
    instead of meeting the other dead ones one by one. At most once a second per process."""
    pool = getattr(db.connection, "pool", None)
    if pool is None or time.monotonic() - _pool_checked_at[0] < 1.0:
        return
    _pool_checked_at[0] = time.monotonic()

    def check():
        try:
            pool.check()
        except Exception:
            logger.warning("database pool check failed", exc_info=True)

    threading.Thread(target=check, name="mango-pool-check", daemon=True).start()


def new_request_id() -> str:
    """The id of one request (the `request-id` header and the envelope's request_id)."""
    return f"req_{uuid.uuid4().hex}"


def scope_request_id(scope: dict) -> str:
    """An ASGI endpoint's request id: the one Django's RequestIdMiddleware gave the request when it
    came that way (sessions/streams/wsgi.py hands it over as `mango.request_id`), else a new one."""
    return scope.get("mango.request_id") or new_request_id()


def error_body(*, status: int, type: str, message: str, details: dict | None, request_id: str | None) -> dict:
    return {
        "type": "error",
        "error": {"type": type, "message": message, "details": details or {}},
        "request_id": request_id,
    }


def error_json(error: "ApiError", request_id: str | None) -> bytes:
    """The envelope's bytes: every exit that answers an error (Django's, the ASGI edge's, the HTTP
    protocol's own) writes these."""
    body = error_body(
        status=error.status, type=error.type, message=error.message, details=error.details, request_id=request_id
    )
    return json.dumps(body, cls=DjangoJSONEncoder).encode()


def error_response(request, error: ApiError) -> HttpResponse:
    response = HttpResponse(
        error_json(error, getattr(request, "request_id", None)), status=error.status, content_type="application/json"
    )
    for name, value in error.headers.items():
        response[name] = value
    return response


def _flatten_validation(detail, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            if isinstance(key, int):  # a ListField's per-item errors
                out += _flatten_validation(value, f"{prefix}[{key}]")
                continue
            name = key if key != "non_field_errors" else ""
            out += _flatten_validation(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            if isinstance(value, (dict, list)) and not _is_leaf_list(value):
                out += _flatten_validation(value, f"{prefix}[{index}]" if prefix else f"[{index}]")
            else:
                out += _flatten_validation(value, prefix)
        return out
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def _is_leaf_list(value) -> bool:
    return isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)


def to_api_error(exc: Exception) -> ApiError | None:
    """Map any exception we know how to describe to an ApiError; None for the unexpected."""
    if isinstance(exc, ApiError):
        return exc
    for exc_type, to_error in _mappers:
        if isinstance(exc, exc_type):
            return to_error(exc)
    if isinstance(exc, drf_exceptions.ValidationError):
        return InvalidRequest("; ".join(_flatten_validation(exc.detail)) or "Invalid request.")
    if isinstance(exc, drf_exceptions.ParseError):
        return InvalidRequest(f"Malformed request body: {exc.detail}")
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return InvalidRequest(str(exc.detail))
    if isinstance(exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)):
        return AuthenticationFailed(str(exc.detail))
    if isinstance(exc, (drf_exceptions.PermissionDenied, DjangoPermissionDenied)):
        return PermissionDenied()
    if isinstance(exc, (drf_exceptions.NotFound, Http404)):
        return NotFound()
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, drf_exceptions.Throttled):
        return RateLimited(str(exc.detail))
    if isinstance(exc, PoolTimeout) or isinstance(exc.__cause__, PoolTimeout):
        # The pool cannot tell "every connection busy" from "no connection can be made".
        return DatabaseBusy() if database_answers() else DatabaseUnavailable()
    if isinstance(exc, DATABASE_DOWN_ERRORS) or isinstance(exc.__cause__, DATABASE_DOWN_ERRORS):
        _check_pool_soon()
        return DatabaseUnavailable()
    if isinstance(exc, QUEUE_DOWN_ERRORS):
        return QueueUnavailable()
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge()
    if isinstance(exc, SecretsUnavailable):
        # The operator's key is missing or changed: not the client's fault, and no secret in it.
        return ServiceUnavailable(f"Stored secrets cannot be read: {exc}.", code="secrets_unavailable")
    if isinstance(exc, SuspiciousOperation):
        return InvalidRequest(str(exc) or "Bad request.")
    if isinstance(exc, drf_exceptions.APIException):
        error = ApiError(str(exc.detail))
        error.status = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "api_error"
        return error
    return None


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: every error a view raises leaves here as the envelope."""
    request = context.get("request")
    return error_response(request, api_error_for(exc, request_id=getattr(request, "request_id", None)))


def api_error_for(exc: Exception, *, request_id: str | None) -> ApiError:
    """The error every exception leaves as, from a DRF view or an ASGI endpoint alike: a known
    one as its ApiError, the unexpected logged and answered as a 500; an authentication failure
    carries the `WWW-Authenticate: Bearer` challenge (RFC 9110 §11.6.1)."""
    error = to_api_error(exc)
    if error is None:
        logger.exception("unhandled error", extra={"request_id": request_id})
        error = ApiError()
    if isinstance(error, AuthenticationFailed):
        error.headers = {**error.headers, "WWW-Authenticate": "Bearer"}
    return error
