import logging
import uuid

from core.errors import ApiError, error_response, to_api_error

logger = logging.getLogger(__name__)


class RequestIdMiddleware:
    """Give every request an id, put it in the `request-id` header of every response, and turn
    anything that escapes a view (outside DRF's handler) into the error envelope: never HTML,
    never a traceback."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = f"req_{uuid.uuid4().hex}"
        response = self.get_response(request)
        response["request-id"] = request.request_id
        return response

    def process_exception(self, request, exception):
        error = to_api_error(exception)
        if error is None:
            logger.exception("unhandled error", extra={"request_id": getattr(request, "request_id", None)})
            error = ApiError()
        return error_response(request, error)
