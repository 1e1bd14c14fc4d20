from core.errors import ApiError, InvalidRequest


class FileNotDownloadable(InvalidRequest):
    message = "This file is not downloadable: only session-scoped files (resource copies and outputs) are."
    code = "file_not_downloadable"


class RangeNotSatisfiable(ApiError):
    status = 416
    type = "invalid_request_error"
    message = "Requested range not satisfiable."
    code = "range_not_satisfiable"
