"""Endpoints outside the public API: health, readiness and the JSON error handlers that Django
uses for requests no view answered (unknown routes, CSRF, crashes)."""

from django.http import JsonResponse

from core import readiness
from core.errors import ApiError, InvalidRequest, NotFound, PermissionDenied, error_response


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    """Every check the apps registered (core/readiness.py); 503 naming what is down."""
    results, down = readiness.run_checks()
    if down:
        error = ApiError(f"Not ready: {', '.join(down)} down.", details={"checks": results})
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
