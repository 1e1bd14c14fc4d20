"""/v1/environments/{id}/work: the self-hosted work queue (the SDK's `environments.work`).

Which credential each route takes is the SDK's (resources/beta/environments/work.py):
poll and list take the environment key, and refuse an API key; ack and heartbeat the
environment key or the item's own work token; stop any of the three; retrieve, update and stats
an API key only (sessions/queue/auth.py refuses the worker's credentials there).

`GET …/work/poll` is served on the event loop by the ASGI application (sessions/streams/polls.py:
it holds no thread and no database connection while it waits); the view here serves the same
poll for WSGI-only servers (the test live server, runserver), waiting in its thread without a
database connection."""

import time

import redis
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from agents.selectors import environment_get
from core.api import Paging, query_int
from core.apiview import AgentsApi
from core.errors import AuthenticationFailed
from core.serializers import validated
from core.serving import release_database_connections
from sessions import notify
from sessions.queue import services as work_services
from sessions.queue.auth import credential_kind
from sessions.queue.credentials import work_secret
from sessions.queue.selectors import work_get, work_list, work_stats
from sessions.queue.serializers import (
    WorkHeartbeatOutputSerializer,
    WorkListOutputSerializer,
    WorkOutputSerializer,
    WorkQueueStatsOutputSerializer,
    WorkStopInputSerializer,
    WorkUpdateInputSerializer,
    heartbeat_to_wire,
    stats_to_wire,
    work_to_wire,
)

PAGES = Paging(maximum=1000, default=20)
BLOCK_MS_MAX = 999
WORKER_ID_HEADER = "HTTP_ANTHROPIC_WORKER_ID"

_REFUSED = {
    "api_key": "This route takes the environment's key (the SDK's environment_key), not an API key.",
    "environment_key": "This route takes an API key, not an environment key.",
    "work_token": "This route takes an API key, not a work item's token.",
}


def poll_parameters(query: dict) -> dict:
    """block_ms (1-999; absent: no wait) and reclaim_older_than_ms, from a query dict."""

    class _Query:
        query_params = query

    return {
        "block_ms": query_int(_Query, "block_ms", minimum=1, maximum=BLOCK_MS_MAX),
        "reclaim_older_than_ms": query_int(_Query, "reclaim_older_than_ms", minimum=0),
    }


def poll_once(*, environment_id: str, worker_id: str, reclaim_older_than_ms: int | None) -> dict | None:
    """One claim attempt (a short database call): the item as the poll answers it, with its secret."""
    work_services.worker_polled(environment_id=environment_id, worker_id=worker_id)
    item = work_services.work_claim(
        environment_id=environment_id, worker_id=worker_id, reclaim_older_than_ms=reclaim_older_than_ms
    )
    if item is None:
        return None
    return work_to_wire(item, secret=work_secret(work_id=item.id, session_id=item.session_id, claim=item.claims))


class WorkApi(AgentsApi):
    """A work route: the credentials it takes, and the environment the caller may reach."""

    accepts: tuple[str, ...] = ("api_key",)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        kind = credential_kind(request.auth)
        if kind not in self.accepts:
            raise AuthenticationFailed(_REFUSED[kind])

    def environment(self, request, environment_id: str) -> str:
        """The path's environment id, once the caller may reach it: an API key's workspace holds it
        (a foreign one is a 404); a worker credential names it (sessions/queue/auth.py checked)."""
        if credential_kind(request.auth) == "api_key":
            environment_get(workspace=request.user, environment_id=environment_id)
        return environment_id


class WorkListApi(WorkApi):
    accepts = ("environment_key",)

    @extend_schema(
        operation_id="environments_work_list", parameters=PAGES.parameters(), responses=WorkListOutputSerializer
    )
    def get(self, request, environment_id: str):
        rows, next_page = work_list(environment_id=self.environment(request, environment_id), **PAGES.read(request))
        return Response({"data": [work_to_wire(row) for row in rows], "next_page": next_page})


class WorkPollApi(WorkApi):
    accepts = ("environment_key",)

    @extend_schema(
        operation_id="environments_work_poll",
        parameters=[
            OpenApiParameter("block_ms", int, description="1-999: how long to wait for work; absent: no wait."),
            OpenApiParameter("reclaim_older_than_ms", int, description="Default 5000."),
            OpenApiParameter("Anthropic-Worker-ID", str, location=OpenApiParameter.HEADER),
        ],
        # A work item, or null (sessions.schema.add_event_stream makes the 200 nullable).
        responses=WorkOutputSerializer,
    )
    def get(self, request, environment_id: str):
        params = poll_parameters(request.query_params)
        environment_id = self.environment(request, environment_id)
        worker_id = request.META.get(WORKER_ID_HEADER, "")
        found = poll_once(
            environment_id=environment_id,
            worker_id=worker_id,
            reclaim_older_than_ms=params["reclaim_older_than_ms"],
        )
        if found is None and params["block_ms"]:
            _wait_for_work(environment_id, params["block_ms"] / 1000)
            found = poll_once(
                environment_id=environment_id,
                worker_id=worker_id,
                reclaim_older_than_ms=params["reclaim_older_than_ms"],
            )
        if found is None:  # DRF renders None as an empty body; the SDK reads JSON null as "no work"
            return HttpResponse(b"null", content_type="application/json")
        return Response(found)


def _wait_for_work(environment_id: str, seconds: float) -> None:
    """The WSGI poll's wait: no database connection held, a Redis wake-up or the timeout."""
    release_database_connections()
    deadline = time.monotonic() + seconds
    pubsub = notify.client().pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(work_services.work_channel(environment_id))
        while (left := deadline - time.monotonic()) > 0:
            if pubsub.get_message(timeout=left) is not None:  # None: the subscribe confirmation, or time
                return
    except redis.RedisError:
        pass
    finally:
        pubsub.close()


class WorkStatsApi(WorkApi):
    @extend_schema(operation_id="environments_work_stats", responses=WorkQueueStatsOutputSerializer)
    def get(self, request, environment_id: str):
        environment_id = self.environment(request, environment_id)
        return Response(
            stats_to_wire(
                work_stats(environment_id=environment_id),
                workers_polling=work_services.workers_polling(environment_id=environment_id),
            )
        )


class WorkDetailApi(WorkApi):
    @extend_schema(operation_id="environments_work_retrieve", responses=WorkOutputSerializer)
    def get(self, request, environment_id: str, work_id: str):
        return Response(
            work_to_wire(work_get(environment_id=self.environment(request, environment_id), work_id=work_id))
        )

    @extend_schema(
        operation_id="environments_work_update", request=WorkUpdateInputSerializer, responses=WorkOutputSerializer
    )
    def post(self, request, environment_id: str, work_id: str):
        data = validated(WorkUpdateInputSerializer, request.data)
        item = work_services.work_update(
            environment_id=self.environment(request, environment_id), work_id=work_id, metadata=data["metadata"]
        )
        return Response(work_to_wire(item))


class WorkAckApi(WorkApi):
    accepts = ("environment_key", "work_token")

    @extend_schema(operation_id="environments_work_ack", request=None, responses=WorkOutputSerializer)
    def post(self, request, environment_id: str, work_id: str):
        item = work_services.work_ack(environment_id=self.environment(request, environment_id), work_id=work_id)
        return Response(work_to_wire(item))


class WorkHeartbeatApi(WorkApi):
    accepts = ("environment_key", "work_token")

    @extend_schema(
        operation_id="environments_work_heartbeat",
        request=None,
        parameters=[
            OpenApiParameter("desired_ttl_seconds", int),
            OpenApiParameter("expected_last_heartbeat", str, description="NO_HEARTBEAT before the first one."),
        ],
        responses={
            200: WorkHeartbeatOutputSerializer,
            412: OpenApiResponse(description="heartbeat_precondition_failed: details.current_state is the lease."),
        },
    )
    def post(self, request, environment_id: str, work_id: str):
        result = work_services.work_heartbeat(
            environment_id=self.environment(request, environment_id),
            work_id=work_id,
            desired_ttl_seconds=query_int(request, "desired_ttl_seconds", minimum=1),
            expected_last_heartbeat=request.query_params.get("expected_last_heartbeat"),
        )
        return Response(heartbeat_to_wire(result))


class WorkStopApi(WorkApi):
    accepts = ("api_key", "environment_key", "work_token")

    @extend_schema(
        operation_id="environments_work_stop", request=WorkStopInputSerializer, responses=WorkOutputSerializer
    )
    def post(self, request, environment_id: str, work_id: str):
        data = validated(WorkStopInputSerializer, request.data)
        item = work_services.work_stop(
            environment_id=self.environment(request, environment_id), work_id=work_id, force=data["force"]
        )
        return Response(work_to_wire(item))
