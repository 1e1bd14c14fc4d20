"""The dream's wire shapes (the SDK's BetaDream) and the create body's checks: every field the
SDK sends is acted on or refused with a 400 naming it."""

from rest_framework import serializers

from core.api import rfc3339
from core.errors import InvalidRequest
from dreams.models import Dream

INSTRUCTIONS_MAX_CHARS = 4096
MODEL_ID_MAX_CHARS = 256
SESSIONS_MAX = 100
ID_MAX_CHARS = 128
CREATE_FIELDS = ("inputs", "model", "instructions", "output_behavior")


def _id(value, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > ID_MAX_CHARS:
        raise InvalidRequest(f"{field}: must be an id (a string of 1 to {ID_MAX_CHARS} characters).")
    return value


def _object(value, field: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: must be an object.")
    for key in value:
        if key not in allowed:
            raise InvalidRequest(f"{field}.{key}: is not a field of {field}.")
    return value


def _inputs(value) -> tuple[str, list[str]]:
    if not isinstance(value, list):
        raise InvalidRequest("inputs: must be an array of exactly one memory_store and one sessions entry.")
    store_id, session_ids = None, None
    for index, item in enumerate(value):
        where = f"inputs[{index}]"
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "memory_store":
            _object(item, where, ("type", "memory_store_id"))
            if store_id is not None:
                raise InvalidRequest(f"{where}: inputs must hold exactly one memory_store entry.")
            store_id = _id(item.get("memory_store_id"), f"{where}.memory_store_id")
        elif kind == "sessions":
            _object(item, where, ("type", "session_ids"))
            if session_ids is not None:
                raise InvalidRequest(f"{where}: inputs must hold exactly one sessions entry.")
            ids = item.get("session_ids")
            if not isinstance(ids, list) or not 1 <= len(ids) <= SESSIONS_MAX:
                raise InvalidRequest(f"{where}.session_ids: must be an array of 1 to {SESSIONS_MAX} session ids.")
            session_ids = [_id(sid, f"{where}.session_ids[{n}]") for n, sid in enumerate(ids)]
            if len(set(session_ids)) != len(session_ids):
                raise InvalidRequest(f"{where}.session_ids: must not repeat a session id.")
        else:
            raise InvalidRequest(f"{where}.type: must be memory_store or sessions.")
    if store_id is None:
        raise InvalidRequest("inputs: must hold exactly one memory_store entry.")
    if session_ids is None:
        raise InvalidRequest("inputs: must hold exactly one sessions entry.")
    return store_id, sorted(session_ids)


def _model(value) -> str:
    if isinstance(value, dict):
        _object(value, "model", ("id", "speed"))
        if value.get("speed") not in (None, "standard"):
            raise InvalidRequest("model.speed: dreams run at standard speed only.")
        value, field = value.get("id"), "model.id"
    else:
        field = "model"
    if not isinstance(value, str) or not 1 <= len(value) <= MODEL_ID_MAX_CHARS:
        raise InvalidRequest(f"{field}: must be a model id of 1 to {MODEL_ID_MAX_CHARS} characters.")
    return value


def _output_behavior(value, store_id: str) -> str:
    if value is None:
        return "create_new"
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "create_new":
        _object(value, "output_behavior", ("type",))
        return kind
    if kind == "update_existing":
        _object(value, "output_behavior", ("type", "memory_store_id"))
        if value.get("memory_store_id") != store_id:
            raise InvalidRequest(
                "output_behavior.memory_store_id: must be the memory store of the memory_store entry of inputs."
            )
        return kind
    raise InvalidRequest("output_behavior.type: must be create_new or update_existing.")


def parse_dream_create(body) -> dict:
    """The create body → {memory_store_id, session_ids (sorted), model_id, instructions, output_behavior}."""
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object.")
    for key in body:
        if key not in CREATE_FIELDS:
            raise InvalidRequest(f"{key}: is not a field of a dream.")
    if "inputs" not in body:
        raise InvalidRequest("inputs: is required.")
    if "model" not in body:
        raise InvalidRequest("model: is required.")
    store_id, session_ids = _inputs(body["inputs"])
    instructions = body.get("instructions")
    if instructions is not None and (
        not isinstance(instructions, str) or not 1 <= len(instructions) <= INSTRUCTIONS_MAX_CHARS
    ):
        raise InvalidRequest(f"instructions: must be a string of 1 to {INSTRUCTIONS_MAX_CHARS} characters.")
    return {
        "memory_store_id": store_id,
        "session_ids": session_ids,
        "model_id": _model(body["model"]),
        "instructions": instructions,
        "output_behavior": _output_behavior(body.get("output_behavior"), store_id),
    }


def dream_to_wire(dream: Dream, *, usage: dict) -> dict:
    behavior = {"type": dream.output_behavior}
    if dream.output_behavior == "update_existing":
        behavior["memory_store_id"] = dream.memory_store_id
    # Empty while pending (as the SDK says), even for update_existing, whose store is known.
    shown = dream.output_store_id and dream.status != Dream.Status.PENDING
    outputs = [{"type": "memory_store", "memory_store_id": dream.output_store_id}] if shown else []
    return {
        "type": "dream",
        "id": dream.id,
        "status": dream.status,
        "inputs": [
            {"type": "memory_store", "memory_store_id": dream.memory_store_id},
            {"type": "sessions", "session_ids": list(dream.session_ids)},
        ],
        "model": {"id": dream.model_id, "speed": "standard"},
        "instructions": dream.instructions,
        "output_behavior": behavior,
        "outputs": outputs,
        "session_id": dream.session_id,
        "error": dream.error,
        "usage": usage,
        "created_at": rfc3339(dream.created_at),
        "ended_at": rfc3339(dream.ended_at),
        "archived_at": rfc3339(dream.archived_at),
    }


# --- OpenAPI descriptions (drf-spectacular reads these; the views render dream_to_wire) ------


class DreamOutputSerializer(serializers.Serializer):
    type = serializers.CharField()
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=Dream.Status.choices)
    inputs = serializers.ListField(child=serializers.DictField())
    model = serializers.DictField()
    instructions = serializers.CharField(allow_null=True)
    output_behavior = serializers.DictField()
    outputs = serializers.ListField(child=serializers.DictField())
    session_id = serializers.CharField(allow_null=True)
    error = serializers.DictField(allow_null=True)
    usage = serializers.DictField()
    created_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    archived_at = serializers.DateTimeField(allow_null=True)


class DreamCreateInputSerializer(serializers.Serializer):
    inputs = serializers.ListField(child=serializers.DictField())
    model = serializers.JSONField()
    instructions = serializers.CharField(required=False, allow_null=True)
    output_behavior = serializers.DictField(required=False)


class DreamListOutputSerializer(serializers.Serializer):
    data = DreamOutputSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)
