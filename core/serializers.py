"""Strict DRF input fields shared by the API's input serializers (STYLE.md §18).

DRF's stock fields coerce (`7` becomes `"7"`, `"true"` becomes True, strings are trimmed); the
wire accepts JSON types as sent, so these fields do not. Every string has a maximum length and
every free-form JSON value a maximum size and nesting depth: limits are part of the schema.
"""

import builtins
import json

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from core.errors import InvalidRequest


class Text(serializers.CharField):
    """A JSON string, as sent (no trimming, no coercion), at most `max_length` characters."""

    default_error_messages = {
        "invalid": "must be a string.",
        "blank": "must be a non-empty string.",
        "max_length": "must be at most {max_length} characters.",
        "required": "required.",
        "null": "must be a string.",
    }

    def __init__(self, *, max_length: int, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(max_length=max_length, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class Bool(serializers.BooleanField):
    default_error_messages = {"invalid": "must be a boolean.", "required": "required.", "null": "must be a boolean."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class Int(serializers.IntegerField):
    default_error_messages = {
        "invalid": "must be an integer.",
        "required": "required.",
        "null": "must be an integer.",
        "max_value": "must be at most {max_value}.",
        "min_value": "must be at least {min_value}.",
    }

    def __init__(self, **kwargs):
        # Integers land in 32-bit columns or are compared with them.
        kwargs.setdefault("min_value", -(2**31))
        kwargs.setdefault("max_value", 2**31 - 1)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class Object(serializers.DictField):
    default_error_messages = {"not_a_dict": "must be an object.", "required": "required.", "null": "must be an object."}


class Array(serializers.ListField):
    default_error_messages = {
        "not_a_list": "must be an array.",
        "required": "required.",
        "null": "must be an array.",
        "max_length": "at most {max_length} items.",
        "min_length": "must not be empty.",
        "empty": "must not be empty.",
    }


def json_depth(value) -> int:
    """Nesting depth of a decoded JSON value (a scalar is 0, `{}` and `[]` are 1), iteratively."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


class FreeJson(serializers.JSONField):
    """Any JSON value the client chooses (a tool's input schema, a web tool's options), bounded
    in encoded size and nesting depth."""

    default_error_messages = {
        "too_large": "must be at most {max_bytes} bytes of JSON.",
        "too_deep": "must be nested at most {max_depth} levels.",
        "not_object": "must be an object.",
        "required": "required.",
    }

    def __init__(self, *, max_bytes: int, max_depth: int, object_only: bool = False, **kwargs):
        self.max_bytes, self.max_depth, self.object_only = max_bytes, max_depth, object_only
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if self.object_only and not isinstance(data, dict):
            self.fail("not_object")
        if json_depth(data) > self.max_depth:
            self.fail("too_deep", max_depth=self.max_depth)
        if len(json.dumps(data, separators=(",", ":"))) > self.max_bytes:
            self.fail("too_large", max_bytes=self.max_bytes)
        return data


class TypedUnion(serializers.Field):
    """An object whose `type` picks its serializer: `choices` maps each type to an input
    serializer class. The OpenAPI schema is a oneOf with a `type` discriminator."""

    default_error_messages = {
        "not_object": "must be an object.",
        "bad_type": "type: must be one of {types}.",
        "required": "required.",
        "null": "must be an object.",
    }

    def __init__(self, *, choices: dict[str, type[serializers.Serializer]], **kwargs):
        self.choices = choices
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_object")
        serializer_class = self.choices.get(data.get("type")) if isinstance(data.get("type"), str) else None
        if serializer_class is None:
            self.fail("bad_type", types=", ".join(self.choices))
        serializer = serializer_class(data=data, context=self.context)
        if not serializer.is_valid():
            raise serializers.ValidationError(serializer.errors)
        return serializer.validated_data

    def to_representation(self, value):
        return value


class TypedUnionExtension(OpenApiSerializerFieldExtension):
    target_class = TypedUnion
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        refs = {kind: auto_schema.resolve_serializer(cls, direction).ref for kind, cls in self.target.choices.items()}
        return {
            "oneOf": list(refs.values()),
            "discriminator": {"propertyName": "type", "mapping": {k: v["$ref"] for k, v in refs.items()}},
        }


class FreeJsonExtension(OpenApiSerializerFieldExtension):
    target_class = FreeJson

    def map_serializer_field(self, auto_schema, direction):
        return build_basic_type(OpenApiTypes.OBJECT) if self.target.object_only else {}


class StringOrObject(serializers.Field):
    """A field that takes a string or an object (`object_serializer`); subclasses parse it. The
    OpenAPI schema is a oneOf of `string_schema` and the serializer's component."""

    string_schema: dict = {"type": "string"}
    object_serializer: type[serializers.Serializer]

    def to_representation(self, value):
        return value


class StringOrObjectExtension(OpenApiSerializerFieldExtension):
    target_class = StringOrObject
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        component = auto_schema.resolve_serializer(self.target.object_serializer, direction)
        return {"oneOf": [dict(self.target.string_schema), component.ref]}


class InputSerializer(serializers.Serializer):
    # An input body: unknown keys are ignored, as by the upstream API; validation errors become
    # one 400 envelope whose message names each field (core.errors).

    default_error_messages = {"invalid": "The request body must be a JSON object."}


def validated(serializer_class: type[serializers.Serializer], data, **context) -> dict:
    """`data` validated by `serializer_class`: its validated_data, or an InvalidRequest."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- response shapes (schema only: views render dicts; tests validate every response against the
# document these produce) ---------------------------------------------------------------------


def page_output(name: str, item: type[serializers.Serializer], *, prev_page: bool = False, **extra):
    """The list envelope `{data, next_page[, prev_page], **extra}` around `item`, as a named
    component (api-contract.md: both list envelopes)."""
    fields = {"data": item(many=True), **extra, "next_page": serializers.CharField(allow_null=True)}
    if prev_page:
        fields["prev_page"] = serializers.CharField(allow_null=True)
    return type(name, (serializers.Serializer,), fields)


def deleted_output(name: str, *, type: str):
    """The `{id, type: "<kind>_deleted"}` marker a DELETE answers with, as a named component."""
    fields = {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=[type])}
    return builtins.type(name, (serializers.Serializer,), fields)
