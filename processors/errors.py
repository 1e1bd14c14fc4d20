"""Errors raised by the pure processors.

They are plain exceptions (no Django, no DRF) so the package stays importable and testable on its
own. Each one is a client error: the API layer renders it as a 400 `invalid_request_error`, using
`message` as the message and `reason` as the error code, e.g.
`InvalidRequest(exc.message, code=exc.reason)`.
"""


class ProcessorError(ValueError):
    status = 400
    type = "invalid_request_error"

    def __init__(self, message: str, *, reason: str = "invalid"):
        super().__init__(message)
        self.message = message
        self.reason = reason

    def __str__(self) -> str:
        return self.message


class InvalidMountPath(ProcessorError):
    def __init__(self, message: str):
        super().__init__(message, reason="invalid_mount_path")
