"""The self-hosted work queue's wire shapes (the SDK's BetaSelfHostedWork, its heartbeat response,
the queue stats and the 412 details), and the input of update and stop."""

from rest_framework import serializers

from core.api import rfc3339
from core.limits import Metadata
from core.serializers import InputSerializer, page_output

WORK_STATES = ["queued", "starting", "active", "stopping", "stopped"]


def work_to_wire(item, *, secret: str | None = None) -> dict:
    """`secret` only on the poll that hands the item out (null on every other path)."""
    return {
        "id": item.id,
        "type": "work",
        "environment_id": item.environment_id,
        "data": {"type": "session", "id": item.session_id},
        "state": item.state,
        "metadata": item.metadata,
        "secret": secret,
        "created_at": rfc3339(item.created_at),
        "acknowledged_at": rfc3339(item.acknowledged_at),
        "started_at": rfc3339(item.started_at),
        "latest_heartbeat_at": rfc3339(item.latest_heartbeat_at),
        "stop_requested_at": rfc3339(item.stop_requested_at),
        "stopped_at": rfc3339(item.stopped_at),
    }


def heartbeat_to_wire(result: dict) -> dict:
    return {"type": "work_heartbeat", **result}


def stats_to_wire(stats: dict, *, workers_polling: int | None) -> dict:
    return {
        "type": "work_queue_stats",
        "depth": stats["depth"],
        "pending": stats["pending"],
        "oldest_queued_at": rfc3339(stats["oldest_queued_at"]),
        "workers_polling": workers_polling,
    }


class WorkUpdateInputSerializer(InputSerializer):
    metadata = Metadata(allow_null_values=True, required=True, allow_null=False)


class WorkStopInputSerializer(InputSerializer):
    force = serializers.BooleanField(required=False, default=False)


# --- response shapes (schema only: rendering is the functions above) ------------------------------


class WorkDataOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["session"])
    id = serializers.CharField()


class WorkOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["work"])
    environment_id = serializers.CharField()
    data = WorkDataOutputSerializer()
    state = serializers.ChoiceField(choices=WORK_STATES)
    metadata = serializers.DictField(child=serializers.CharField())
    secret = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    latest_heartbeat_at = serializers.DateTimeField(allow_null=True)
    stop_requested_at = serializers.DateTimeField(allow_null=True)
    stopped_at = serializers.DateTimeField(allow_null=True)


WorkListOutputSerializer = page_output("WorkListOutputSerializer", WorkOutputSerializer)


class WorkHeartbeatOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["work_heartbeat"])
    last_heartbeat = serializers.CharField(allow_blank=True)
    lease_extended = serializers.BooleanField()
    state = serializers.ChoiceField(choices=WORK_STATES)
    ttl_seconds = serializers.IntegerField()


class WorkQueueStatsOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["work_queue_stats"])
    depth = serializers.IntegerField()
    pending = serializers.IntegerField()
    oldest_queued_at = serializers.DateTimeField(allow_null=True)
    workers_polling = serializers.IntegerField(allow_null=True)
