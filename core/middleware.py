import logging

from core.errors import InvalidRequest, api_error_for, error_response, new_request_id

logger = logging.getLogger(__name__)


class RequestIdMiddleware:
    """Give every request an id, put it in the `request-id` header of every response, and turn
    anything that escapes a view (outside DRF's handler) into the error envelope: never HTML,
    never a traceback."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = new_request_id()
        if _has_nul(request):
            response = error_response(request, InvalidRequest("The URL must not contain NUL characters."))
        else:
            response = self.get_response(request)
        response["request-id"] = request.request_id
        return response

    def process_exception(self, request, exception):
        return error_response(request, api_error_for(exception, request_id=getattr(request, "request_id", None)))


def _has_nul(request) -> bool:
    """A NUL in the path or a query parameter can reach no stored value (PostgreSQL refuses it):
    refuse it up front instead of failing in a query."""
    if "\x00" in request.path:
        return True
    return any("\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists())
