"""Client events: input serializers per event type, and the wire shape of every event
(api-contract.md §7)."""

from rest_framework import serializers

from core.api import rfc3339
from core.errors import InvalidRequest
from core.limits import (
    DESCRIPTION_MAX_CHARS,
    EVENT_BLOCK_MAX_DEPTH,
    EVENT_BLOCKS_MAX,
    EVENT_SOURCE_MAX_BYTES,
    EVENT_TEXT_MAX_CHARS,
    EVENTS_PER_REQUEST_MAX,
    ID_MAX_CHARS,
    INITIAL_EVENTS_MAX,
    RUBRIC_MAX_CHARS,
    PassThrough,
)
from core.serializers import Array, Bool, FreeJson, InputSerializer, Int, Text, TypedUnion, page_output, validated
from sessions.events import CLIENT_EVENT_TYPES

USER_EVENT_TYPES = CLIENT_EVENT_TYPES
INITIAL_EVENT_TYPES = ("user.message", "user.define_outcome")
MAX_INITIAL_EVENTS = INITIAL_EVENTS_MAX
# Client events whose object types processed_at as a required datetime (not nullable).
# Types whose SDK event requires processed_at: an unprocessed one shows when it was received.
PROCESSED_AT_REQUIRED = ("user.define_outcome", "agent.thread_message_received")


# --- content blocks (stored as sent, after these checks) -------------------------------------


class TextBlockSerializer(PassThrough):
    type = serializers.ChoiceField(choices=["text"])
    text = Text(max_length=EVENT_TEXT_MAX_CHARS, allow_blank=True)


def _source():
    return FreeJson(max_bytes=EVENT_SOURCE_MAX_BYTES, max_depth=EVENT_BLOCK_MAX_DEPTH, object_only=True)


class ImageBlockSerializer(PassThrough):
    type = serializers.ChoiceField(choices=["image"])
    source = _source()


class DocumentBlockSerializer(PassThrough):
    type = serializers.ChoiceField(choices=["document"])
    source = _source()


class RedactedBlockSerializer(PassThrough):
    type = serializers.ChoiceField(choices=["redacted"])


class SearchResultBlockSerializer(PassThrough):
    type = serializers.ChoiceField(choices=["search_result"])


MESSAGE_BLOCKS = {
    "text": TextBlockSerializer,
    "image": ImageBlockSerializer,
    "document": DocumentBlockSerializer,
    "redacted": RedactedBlockSerializer,
}
RESULT_BLOCKS = {
    "text": TextBlockSerializer,
    "image": ImageBlockSerializer,
    "document": DocumentBlockSerializer,
    "search_result": SearchResultBlockSerializer,
}


class Blocks(Array):
    """Content blocks of one type family; each block at most EVENT_BLOCK_MAX_DEPTH levels and
    EVENT_SOURCE_MAX_BYTES of JSON."""

    def __init__(self, *, choices: dict, **kwargs):
        block = TypedUnion(choices=choices, validators=[_bounded_block])
        super().__init__(child=block, max_length=EVENT_BLOCKS_MAX, **kwargs)


_BLOCK_BOUNDS = FreeJson(max_bytes=EVENT_SOURCE_MAX_BYTES + EVENT_TEXT_MAX_CHARS * 6, max_depth=EVENT_BLOCK_MAX_DEPTH)


def _bounded_block(block):
    _BLOCK_BOUNDS.to_internal_value(block)


# --- event params ----------------------------------------------------------------------------


class UserMessageSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.message"])
    content = Blocks(choices=MESSAGE_BLOCKS, min_length=1)


class SystemMessageSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["system.message"])
    content = Blocks(choices={"text": TextBlockSerializer}, min_length=1)


class UserInterruptSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.interrupt"])
    session_thread_id = Text(max_length=ID_MAX_CHARS, required=False, allow_null=True)


class UserToolConfirmationSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.tool_confirmation"])
    tool_use_id = Text(max_length=ID_MAX_CHARS)
    result = serializers.ChoiceField(choices=("allow", "deny"))
    deny_message = Text(max_length=EVENT_TEXT_MAX_CHARS, required=False, allow_null=True, allow_blank=True)

    def validate(self, data):
        if data.get("deny_message") is not None and data["result"] != "deny":
            raise serializers.ValidationError({"deny_message": "only with result 'deny'."})
        return data


class UserCustomToolResultSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.custom_tool_result"])
    custom_tool_use_id = Text(max_length=ID_MAX_CHARS)
    content = Blocks(choices=RESULT_BLOCKS, required=False, allow_null=True)
    is_error = Bool(required=False, allow_null=True)


class UserToolResultSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.tool_result"])
    tool_use_id = Text(max_length=ID_MAX_CHARS)
    content = Blocks(choices=RESULT_BLOCKS, required=False, allow_null=True)
    is_error = Bool(required=False, allow_null=True)


class TextRubricSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["text"])
    content = Text(max_length=RUBRIC_MAX_CHARS)


class FileRubricSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["file"])
    file_id = Text(max_length=ID_MAX_CHARS)


class UserDefineOutcomeSerializer(InputSerializer):
    type = serializers.ChoiceField(choices=["user.define_outcome"])
    description = Text(max_length=DESCRIPTION_MAX_CHARS, allow_blank=True)
    rubric = TypedUnion(choices={"text": TextRubricSerializer, "file": FileRubricSerializer})
    max_iterations = Int(min_value=1, max_value=20, required=False, allow_null=True)


EVENT_PARAMS = {
    "user.message": UserMessageSerializer,
    "user.interrupt": UserInterruptSerializer,
    "user.tool_confirmation": UserToolConfirmationSerializer,
    "user.custom_tool_result": UserCustomToolResultSerializer,
    "user.tool_result": UserToolResultSerializer,
    "user.define_outcome": UserDefineOutcomeSerializer,
    "system.message": SystemMessageSerializer,
}


def _payload(data: dict) -> dict:
    """A validated event param → {"type", "payload"} (payload is the public body minus id/type;
    optional fields sent as null are left out, except max_iterations)."""
    kind = data["type"]
    payload = {key: value for key, value in data.items() if key != "type" and value is not None}
    if kind == "user.define_outcome":
        payload["max_iterations"] = data.get("max_iterations")
        payload["rubric"] = dict(data["rubric"])
    return {"type": kind, "payload": payload}


class EventsSendInputSerializer(InputSerializer):
    events = Array(child=TypedUnion(choices=EVENT_PARAMS), min_length=1, max_length=EVENTS_PER_REQUEST_MAX)


class InitialEventsField(Array):
    def __init__(self, **kwargs):
        choices = {kind: EVENT_PARAMS[kind] for kind in INITIAL_EVENT_TYPES}
        super().__init__(child=TypedUnion(choices=choices), max_length=MAX_INITIAL_EVENTS, allow_null=True, **kwargs)


SYSTEM_MESSAGE_FOLLOWS = ("user.message", "user.tool_result", "user.custom_tool_result")


def parse_events(body) -> list[dict]:
    """A send body → [{"type", "payload"}], in order. A system.message (at most one) must be the
    final event and follow the user.message or tool result it accompanies (the SDK's rule)."""
    events = [_payload(event) for event in validated(EventsSendInputSerializer, body)["events"]]
    for index, event in enumerate(events):
        if event["type"] != "system.message":
            continue
        if index != len(events) - 1 or index == 0 or events[index - 1]["type"] not in SYSTEM_MESSAGE_FOLLOWS:
            raise InvalidRequest(
                f"events[{index}]: a system.message must be the last event of the request and immediately follow"
                " the user.message, user.tool_result or user.custom_tool_result it accompanies."
            )
    return events


def initial_events(validated_events: list | None) -> list[dict]:
    return [_payload(event) for event in validated_events or []]


def event_to_wire(event) -> dict:
    wire = {"id": event.id, "type": event.type, **event.payload}
    processed_at = event.processed_at
    if processed_at is None and event.type in PROCESSED_AT_REQUIRED:
        processed_at = event.created_at
    wire["processed_at"] = rfc3339(processed_at)
    return wire


# --- response shapes (schema only: rendering is event_to_wire) --------------------------------


class EventOutputSerializer(serializers.Serializer):
    """Any session event: `id`, `type`, `processed_at`, and the type's own fields."""

    id = serializers.CharField()
    type = serializers.CharField()
    processed_at = serializers.DateTimeField(allow_null=True)


EventListOutputSerializer = page_output("EventListOutputSerializer", EventOutputSerializer)


class EventsSentOutputSerializer(serializers.Serializer):
    data = EventOutputSerializer(many=True)
