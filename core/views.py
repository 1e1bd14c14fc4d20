"""Endpoints outside the public API: health, readiness and the JSON error handlers that Django
uses for requests no view answered (unknown routes, CSRF, crashes)."""

from django.http import JsonResponse
from django.utils.log import log_response

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
        response = error_response(request, error)
        # A dependency being down is an operating state, not a server error: one WARNING line
        # naming it (Django would log every 503 at ERROR).
        down_checks = "; ".join(f"{name}: {results[name]}" for name in down)
        log_response("Not ready: %s", down_checks, response=response, request=request, level="warning")
        return response
    return JsonResponse({"status": "ready", "checks": results})


def handler400(request, exception=None):
    return error_response(request, InvalidRequest("Bad request."))


def handler403(request, exception=None):
    return error_response(request, PermissionDenied())


def handler404(request, exception=None):
    return error_response(request, NotFound(f"No route for {request.method} {request.path}."))


def handler500(request):
    return error_response(request, ApiError())
