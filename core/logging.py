"""One JSON object per line, from every process (gunicorn, Celery worker and beat, management
commands): easy to ship, easy to grep.

Every `extra=` field of a record is kept (`object_key`, `intent_id`, …), not a fixed list.
gunicorn's access lines become structured fields, with the response's `request-id`.
"""

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

# gunicorn's access logger passes its atoms as the record's args (a dict-like).
_ACCESS_FIELDS = {
    "m": "method",
    "U": "path",
    "q": "query",
    "s": "status",
    "B": "response_bytes",
    "h": "remote_addr",
    "a": "user_agent",
}


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger", "exc_info": "exc"})
        kwargs.setdefault("timestamp", "ts")
        super().__init__("%(levelname)s %(name)s %(message)s", *args, **kwargs)

    def add_fields(self, log_data, record, message_dict):
        super().add_fields(log_data, record, message_dict)
        if record.name == "gunicorn.access" and record.args is not None and hasattr(record.args, "get"):
            self._add_access_fields(log_data, record.args)

    def process_log_record(self, log_data):
        # The fixed fields first, then whatever the record carried.
        head = {key: log_data.pop(key) for key in ("ts", "level", "logger", "message") if key in log_data}
        return {**head, **log_data}

    @staticmethod
    def _add_access_fields(log_data, atoms) -> None:
        for atom, field in _ACCESS_FIELDS.items():
            value = atoms.get(atom)
            if value not in (None, "-"):
                log_data[field] = value
        if log_data.get("status", "").isdigit():
            log_data["status"] = int(log_data["status"])
        # {request-id}o: the response header RequestIdMiddleware sets on every response.
        request_id = atoms.get("{request-id}o")
        if request_id not in (None, "-"):
            log_data["request_id"] = request_id
        duration_us = atoms.get("D")
        if duration_us not in (None, "-"):
            log_data["duration_ms"] = round(int(duration_us) / 1000, 3)


def json_logging_config(level: str) -> dict:
    """The dictConfig every process uses (Django's LOGGING, gunicorn's logconfig_dict)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "core.logging.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.server": {"level": "WARNING"},
            # httpx2 (every outbound call to a tenant's endpoint: MCP servers, OAuth, webhooks)
            # logs each request's URL at INFO: a tenant's URL may carry a token in its query, and
            # the line was ~7 % of a webhook delivery worker's CPU (bench/webhooks_delivery.py).
            "httpx2": {"level": "WARNING"},
            # gunicorn's own loggers log through the root handler (JSON), not their own.
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": True},
        },
    }
