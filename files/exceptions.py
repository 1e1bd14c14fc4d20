from core.errors import ApiError, InvalidRequest, NotFound


class FileNotDownloadable(InvalidRequest):
    message = "This file is not downloadable: only session-scoped files (resource copies and outputs) are."
    code = "file_not_downloadable"


class RangeNotSatisfiable(ApiError):
    status = 416
    type = "invalid_request_error"
    message = "Requested range not satisfiable."
    code = "range_not_satisfiable"


class StoredObjectMissing(NotFound):
    """A row names an object the store no longer holds (lost outside Mango's protocol): a clear
    404, never a 500."""

    message = "The stored content is missing from the object store."
    code = "object_missing"
