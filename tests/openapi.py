"""Every response the test suites receive is checked against /openapi.json.

`ResponseSchemaMiddleware` (installed by tests/conftest.py, outermost) matches each response to
its documented operation and status and validates a JSON body against that response's schema;
violations are collected and fail the test that caused them (tests/conftest.py). Requests to
undocumented paths (a test of unknown routes, /admin/, /healthz) are counted but not checked.
"""

import json
import re
import threading
from collections import Counter
from functools import cache

from openapi_schema_validator import OAS31Validator, oas31_format_checker

violations: list[str] = []
checked: Counter = Counter()
_lock = threading.Lock()


@cache
def document() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))


@cache
def _routes() -> list[tuple[re.Pattern, str]]:
    routes = []
    for template in document()["paths"]:
        pattern = re.escape(template)
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", pattern)
        routes.append((re.compile(f"^{pattern}$"), template))
    # Literal segments win over parameters (/events/stream before /events/{x}).
    routes.sort(key=lambda route: route[1].count("{"))
    return routes


def operation_for(method: str, path: str) -> tuple[str, dict] | None:
    for pattern, template in _routes():
        if pattern.match(path):
            operation = document()["paths"][template].get(method.lower())
            return (template, operation) if operation else None
    return None


@cache
def _validator(template: str, method: str, status: str, media_type: str) -> OAS31Validator | None:
    operation = document()["paths"][template][method]
    response = operation["responses"].get(status) or operation["responses"].get("default")
    schema = ((response or {}).get("content") or {}).get(media_type, {}).get("schema")
    if schema is None:
        return None
    return OAS31Validator({**schema, "components": document()["components"]}, format_checker=oas31_format_checker)


def check(method: str, path: str, status: int, content_type: str, body: bytes | None) -> list[str]:
    """The ways this response departs from the document (empty when it conforms)."""
    found = operation_for(method, path)
    if found is None:
        return []
    template, operation = found
    key = f"{method.upper()} {template} {status}"
    with _lock:
        checked[key] += 1
    responses = operation["responses"]
    documented = responses.get(str(status)) or responses.get("default")
    if documented is None:
        return [f"{key}: status {status} is not documented"]
    media_type = (content_type or "").split(";")[0].strip()
    content = documented.get("content") or {}
    if not content:
        return []
    if media_type not in content and "*/*" not in content:
        return [f"{key}: content type {media_type!r} is not documented ({sorted(content)})"]
    if body is None or media_type != "application/json":
        return []
    validator = _validator(template, method.lower(), str(status) if str(status) in responses else "default", media_type)
    if validator is None:
        return []
    errors = sorted(validator.iter_errors(json.loads(body)), key=lambda error: list(error.path))
    return [f"{key}: {'/'.join(map(str, error.path))}: {error.message[:300]}" for error in errors[:5]]


class ResponseSchemaMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        streaming = getattr(response, "streaming", False)
        problems = check(
            request.method,
            request.path,
            response.status_code,
            response.get("Content-Type", ""),
            None if streaming else response.content,
        )
        if problems:
            with _lock:
                violations.extend(problems)
        return response
