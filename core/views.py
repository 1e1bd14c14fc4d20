"""Endpoints outside the public API: health, readiness and the JSON error handlers that Django
uses for requests no view answered (unknown routes, CSRF, crashes)."""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from core.errors import ApiError, InvalidRequest, NotFound, PermissionDenied, error_response


def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_redis() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def _check_object_store() -> None:
    from files import storage

    if not storage.is_configured():
        return
    storage.ping()


def readyz(request):
    checks = {"postgresql": _check_database, "redis": _check_redis, "object_store": _check_object_store}
    results, down = {}, []
    for name, check in checks.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 — readiness reports, never raises
            results[name] = f"down: {type(exc).__name__}"
            down.append(name)
    if down:
        error = ApiError(f"Not ready: {', '.join(down)} unreachable.", details={"checks": results})
        error.status = 503
        return error_response(request, error)
    return JsonResponse({"status": "ready", "checks": results})


def handler400(request, exception=None):
    return error_response(request, InvalidRequest("Bad request."))


def handler403(request, exception=None):
    return error_response(request, PermissionDenied())


def handler404(request, exception=None):
    return error_response(request, NotFound(f"No route for {request.method} {request.path}."))


def handler500(request):
    return error_response(request, ApiError())
