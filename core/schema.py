"""The OpenAPI document's shared parts (drf-spectacular): the two ways to send an API key, the
error envelope (api-contract.md §2) on every operation's error responses, and list parameters."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter

ERROR_STATUSES = {
    "400": "Invalid request (invalid_request_error).",
    "401": "Missing or invalid API key (authentication_error).",
    "403": "Permission denied (permission_error).",
    "404": "Not found (not_found_error).",
    "405": "Method not allowed (invalid_request_error).",
    "409": "Conflict (conflict_error).",
    "413": "Request too large (request_too_large).",
    "429": "Rate limited (rate_limit_error).",
    "500": "Internal error (api_error).",
    "503": "A dependency is unavailable (api_error).",
}


ERROR_SCHEMA = {
    "type": "object",
    "description": "The error envelope: every 4xx and 5xx response has this body.",
    "properties": {
        "type": {"type": "string", "enum": ["error"]},
        "error": {
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": True},
            },
            "required": ["type", "message", "details"],
        },
        "request_id": {"type": "string", "nullable": True},
    },
    "required": ["type", "error", "request_id"],
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "core.auth.ApiKeyAuthentication"
    name = ["ApiKeyAuth", "BearerAuth"]

    def get_security_requirement(self, auto_schema):
        # Either header authenticates: two alternatives, not one requirement naming both.
        return [{"ApiKeyAuth": []}, {"BearerAuth": []}]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "apiKey", "in": "header", "name": "x-api-key"},
            {"type": "http", "scheme": "bearer", "description": "The API key as a bearer token (SDK 2.x)."},
        ]


def add_error_responses(result, generator, request, public):
    """POSTPROCESSING_HOOKS: the error envelope on every operation's error statuses."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, description in ERROR_STATUSES.items():
                responses.setdefault(status, {"description": description})
            for status, documented in responses.items():
                if status[0] in "45" and not documented.get("content"):
                    documented["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return result


def list_parameters(*, max_limit: int, default_limit: int | None) -> list[OpenApiParameter]:
    default = f"default {default_limit}" if default_limit else "default: every row"
    return [
        OpenApiParameter("limit", int, description=f"1 to {max_limit}, {default}."),
        OpenApiParameter("page", str, description="Opaque cursor from a previous next_page / prev_page."),
    ]


def time_range_parameters(prefix: str = "created_at") -> list[OpenApiParameter]:
    return [
        OpenApiParameter(f"{prefix}[{op}]", str, description=f"RFC 3339; {prefix} {op} this time.")
        for op in ("gt", "gte", "lt", "lte")
    ]
