"""Agents, environments, sessions and session events over HTTP. Views parse, call a service or
selector, and render (STYLE.md 3); errors are raised, never built here."""

import json
import logging
import time
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections, connection
from django.http import StreamingHttpResponse
from django.utils.dateparse import parse_datetime
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import query_bool, query_int, query_list, require_beta_in_strict_mode
from core.errors import InvalidRequest
from sessions import notify
from sessions.outcomes import outcome_evaluations
from sessions.selectors import (
    agent_get,
    agent_list,
    agent_version_get,
    agent_version_list,
    environment_get,
    environment_list,
    session_event_list,
    session_events_after,
    session_get,
    session_list,
    session_resource_page,
    session_resources_by_session,
)
from sessions.serializers import (
    INITIAL_EVENT_TYPES,
    MAX_INITIAL_EVENTS,
    SESSION_STATUSES,
    agent_to_wire,
    environment_to_wire,
    event_to_wire,
    parse_agent_fields,
    parse_environment_config,
    parse_events,
    parse_metadata,
    resource_to_wire,
    session_to_wire,
)
from sessions.services import agents as agent_services
from sessions.services import environments as environment_services
from sessions.services import resources as resource_services
from sessions.services import sessions as session_services
from sessions.services.events import session_events_send

logger = logging.getLogger(__name__)


class AgentsApi(APIView):
    """Base: the managed-agents beta header is required only in strict mode (api-contract.md §0)."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        require_beta_in_strict_mode(request, settings.MANGO_AGENTS_BETA)


def _body(request) -> dict:
    data = request.data
    if data is None or data == {}:
        return {}
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return data


def _query_datetime(request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    value = parse_datetime(raw.replace(" ", "+"))
    if value is None:
        raise InvalidRequest(f"{name}: must be an RFC 3339 datetime.")
    return value


def _created_filters(request, prefix: str = "created_at") -> dict:
    return {op: _query_datetime(request, f"{prefix}[{op}]") for op in ("gt", "gte", "lt", "lte")}


def _order(request, default: str) -> str:
    order = request.query_params.get("order") or default
    if order not in ("asc", "desc"):
        raise InvalidRequest("order: must be asc or desc.")
    return order


# --- agents ----------------------------------------------------------------------------------


class AgentListCreateApi(AgentsApi):
    def post(self, request):
        fields = parse_agent_fields(_body(request), partial=False)
        agent, version = agent_services.agent_create(workspace=request.user, fields=fields)
        return Response(agent_to_wire(agent, version))

    def get(self, request):
        rows, next_page = agent_list(
            workspace=request.user,
            limit=query_int(request, "limit", default=20, minimum=1, maximum=100),
            page=request.query_params.get("page"),
            include_archived=query_bool(request, "include_archived"),
            created=_created_filters(request),
        )
        return Response({"data": [agent_to_wire(a, v) for a, v in rows], "next_page": next_page})


class AgentDetailApi(AgentsApi):
    def get(self, request, agent_id: str):
        agent = agent_get(workspace=request.user, agent_id=agent_id)
        version = agent_version_get(agent=agent, version=query_int(request, "version", minimum=1))
        return Response(agent_to_wire(agent, version))

    def post(self, request, agent_id: str):
        body = _body(request)
        expected = body.get("version")
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise InvalidRequest("version: must be an integer.")
        fields = parse_agent_fields({k: v for k, v in body.items() if k != "version"}, partial=True)
        agent, version = agent_services.agent_update(
            workspace=request.user, agent_id=agent_id, fields=fields, expected_version=expected
        )
        return Response(agent_to_wire(agent, version))


class AgentArchiveApi(AgentsApi):
    def post(self, request, agent_id: str):
        agent, version = agent_services.agent_archive(workspace=request.user, agent_id=agent_id)
        return Response(agent_to_wire(agent, version))


class AgentVersionsApi(AgentsApi):
    def get(self, request, agent_id: str):
        agent = agent_get(workspace=request.user, agent_id=agent_id)
        rows, next_page = agent_version_list(
            agent=agent,
            limit=query_int(request, "limit", default=20, minimum=1, maximum=100),
            page=request.query_params.get("page"),
        )
        return Response({"data": [agent_to_wire(agent, row) for row in rows], "next_page": next_page})


# --- environments ----------------------------------------------------------------------------


def _scope(value):
    if value is not None and value not in ("organization", "account"):
        raise InvalidRequest("scope: must be organization or account.")
    return value


class EnvironmentListCreateApi(AgentsApi):
    def post(self, request):
        body = _body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("name: required.")
        description = body.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest("description: must be a string or null.")
        environment = environment_services.environment_create(
            workspace=request.user,
            name=name,
            config=parse_environment_config(body.get("config")),
            description=description,
            metadata=parse_metadata(body.get("metadata")),
            scope=_scope(body.get("scope")),
        )
        return Response(environment_to_wire(environment))

    def get(self, request):
        rows, next_page = environment_list(
            workspace=request.user,
            limit=query_int(request, "limit", default=20, minimum=1, maximum=1000),
            page=request.query_params.get("page"),
            include_archived=query_bool(request, "include_archived"),
        )
        return Response({"data": [environment_to_wire(row) for row in rows], "next_page": next_page})


class EnvironmentDetailApi(AgentsApi):
    def get(self, request, environment_id: str):
        return Response(environment_to_wire(environment_get(workspace=request.user, environment_id=environment_id)))

    def post(self, request, environment_id: str):
        body = _body(request)
        changes = {}
        if body.get("name") is not None:
            if not isinstance(body["name"], str) or not body["name"]:
                raise InvalidRequest("name: must be a non-empty string.")
            changes["name"] = body["name"]
        if "description" in body:
            if body["description"] is not None and not isinstance(body["description"], str):
                raise InvalidRequest("description: must be a string or null.")
            changes["description"] = body["description"]
        if "config" in body:
            changes["config"] = body["config"]
        if "metadata" in body:
            changes["metadata"] = parse_metadata(body["metadata"], allow_null_values=True)
        if "scope" in body:
            changes["scope"] = _scope(body["scope"])
        environment = environment_services.environment_update(
            workspace=request.user, environment_id=environment_id, changes=changes
        )
        return Response(environment_to_wire(environment))

    def delete(self, request, environment_id: str):
        environment_services.environment_delete(workspace=request.user, environment_id=environment_id)
        return Response({"id": environment_id, "type": "environment_deleted"})


class EnvironmentArchiveApi(AgentsApi):
    def post(self, request, environment_id: str):
        environment = environment_services.environment_archive(workspace=request.user, environment_id=environment_id)
        return Response(environment_to_wire(environment))


# --- sessions --------------------------------------------------------------------------------


def sessions_wire(sessions: list) -> list[dict]:
    """Sessions as the API renders them, with their resources and outcome evaluations (two
    queries whatever the number of sessions)."""
    ids = [session.id for session in sessions]
    resources = session_resources_by_session(session_ids=ids)
    evaluations = outcome_evaluations(ids)
    return [
        session_to_wire(
            session,
            resources=[resource_to_wire(row) for row in resources[session.id]],
            outcome_evaluations=evaluations[session.id],
        )
        for session in sessions
    ]


def session_wire(session) -> dict:
    return sessions_wire([session])[0]


class SessionListCreateApi(AgentsApi):
    def post(self, request):
        body = _body(request)
        if "agent" not in body:
            raise InvalidRequest("agent: required.")
        title = body.get("title")
        if title is not None and not isinstance(title, str):
            raise InvalidRequest("title: must be a string or null.")
        resources = body.get("resources") or []
        if body.get("vault_ids"):
            raise InvalidRequest("vault_ids: vaults are not supported by this server.")
        initial_events = parse_events(
            body.get("initial_events") or [],
            field="initial_events",
            allowed=INITIAL_EVENT_TYPES,
            maximum=MAX_INITIAL_EVENTS,
        )
        session = session_services.session_create(
            workspace=request.user,
            agent=body["agent"],
            environment_id=body.get("environment_id"),
            metadata=parse_metadata(body.get("metadata")),
            title=title,
            initial_events=initial_events,
            resources=resources,
        )
        return Response(session_wire(session))

    def get(self, request):
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in SESSION_STATUSES:
                raise InvalidRequest(f"statuses: {status!r} is not one of {', '.join(SESSION_STATUSES)}.")
        rows, next_page, prev_page = session_list(
            workspace=request.user,
            limit=query_int(request, "limit", default=20, minimum=1, maximum=1000),
            page=request.query_params.get("page"),
            order=_order(request, "desc"),
            include_archived=query_bool(request, "include_archived"),
            statuses=statuses,
            agent_id=request.query_params.get("agent_id") or None,
            agent_version=query_int(request, "agent_version", minimum=1),
            created=_created_filters(request),
        )
        data = sessions_wire(rows)
        return Response({"data": data, "next_page": next_page, "prev_page": prev_page})


class SessionDetailApi(AgentsApi):
    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        return Response(session_wire(session))

    def post(self, request, session_id: str):
        body = _body(request)
        changes = {}
        if "title" in body:
            if body["title"] is not None and not isinstance(body["title"], str):
                raise InvalidRequest("title: must be a string or null.")
            changes["title"] = body["title"]
        if "metadata" in body:
            changes["metadata"] = parse_metadata(body["metadata"], allow_null_values=True)
        if body.get("agent") is not None:
            if not isinstance(body["agent"], dict):
                raise InvalidRequest("agent: must be an object.")
            if "mcp_servers" in body["agent"] and body["agent"]["mcp_servers"]:
                raise InvalidRequest("agent.mcp_servers: not supported by this server.")
            changes["agent"] = body["agent"]
        if body.get("vault_ids"):
            raise InvalidRequest("vault_ids: cannot be changed.")
        if body.get("budget") is not None:
            raise InvalidRequest("budget: a budget cannot be added to a session created without one.")
        session = session_services.session_update(workspace=request.user, session_id=session_id, changes=changes)
        return Response(session_wire(session))

    def delete(self, request, session_id: str):
        session_services.session_delete(workspace=request.user, session_id=session_id)
        return Response({"id": session_id, "type": "session_deleted"})


class SessionArchiveApi(AgentsApi):
    def post(self, request, session_id: str):
        session = session_services.session_archive(workspace=request.user, session_id=session_id)
        return Response(session_wire(session))


# --- resources -------------------------------------------------------------------------------


class SessionResourcesApi(AgentsApi):
    def post(self, request, session_id: str):
        row = resource_services.resource_add(workspace=request.user, session_id=session_id, param=_body(request))
        return Response(resource_to_wire(row))

    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        # No limit: every resource (api-contract.md §5).
        rows, next_page = session_resource_page(
            session=session,
            limit=query_int(request, "limit", minimum=1, maximum=1000),
            page=request.query_params.get("page"),
        )
        return Response({"data": [resource_to_wire(row) for row in rows], "next_page": next_page})


class SessionResourceDetailApi(AgentsApi):
    def get(self, request, session_id: str, resource_id: str):
        row = resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response(resource_to_wire(row))

    def post(self, request, session_id: str, resource_id: str):
        resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        raise InvalidRequest("Only github_repository resources can be updated (authorization_token rotation).")

    def delete(self, request, session_id: str, resource_id: str):
        resource_services.resource_delete(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response({"id": resource_id, "type": "session_resource_deleted"})


# --- events ----------------------------------------------------------------------------------


class SessionEventsApi(AgentsApi):
    def post(self, request, session_id: str):
        body = _body(request)
        parsed = parse_events(body.get("events"))
        if not parsed:
            raise InvalidRequest("events: must not be empty.")
        rows = session_events_send(workspace=request.user, session_id=session_id, parsed=parsed)
        return Response({"data": [event_to_wire(row) for row in rows]})

    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        rows, next_page = session_event_list(
            session=session,
            limit=query_int(request, "limit", default=1000, minimum=1, maximum=1000),
            page=request.query_params.get("page"),
            order=_order(request, "asc"),
            types=query_list(request, "types"),
            processed=_created_filters(request),
        )
        return Response({"data": [event_to_wire(row) for row in rows], "next_page": next_page})


# How often an SSE stream re-reads the log even without a Redis wake-up (lost publish, Redis down).
STREAM_POLL_SECONDS = 2.0


def _sse(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def event_stream(*, session_id: str, heartbeat_seconds: float, deltas: bool = False):
    """Live events of one session as SSE. Subscribes to the Redis wake-up channel before reading
    the current end of the log, so nothing appended in between is missed; also polls the database
    every STREAM_POLL_SECONDS. Holds no database connection while waiting. With `deltas`, also
    forwards the runner's ephemeral agent.message previews (event_start / event_delta) in the
    order they were published relative to the wake-ups. Ends after session.deleted."""
    from sessions.models import Session

    conn, pubsub = notify.subscribe(session_id, deltas=deltas)
    deltas_channel = notify.deltas_channel(session_id).encode()
    state = {"last_seq": 0, "last_sent": time.monotonic(), "done": False}

    def flush():
        """Frames for every event after the last one sent; marks the stream done after
        session.deleted or when the database is gone."""
        while True:
            try:
                batch = session_events_after(session_id=session_id, after_seq=state["last_seq"])
            except Exception:  # noqa: BLE001 — database gone (shutdown): end the stream
                logger.warning("event stream ended by a database error", extra={"session_id": session_id})
                state["done"] = True
                return
            for event in batch:
                state["last_seq"] = event.seq
                state["last_sent"] = time.monotonic()
                yield _sse(event.type, event_to_wire(event))
                if event.type == "session.deleted":
                    state["done"] = True
                    return
            if len(batch) < 500:
                break
        connection.close()

    try:
        state["last_seq"] = Session.objects.filter(id=session_id).values_list("last_seq", flat=True).first() or 0
        connection.close()
        yield b": connected\n\n"
        last_poll = time.monotonic()
        while not state["done"]:
            try:
                message = pubsub.get_message(timeout=min(1.0, heartbeat_seconds))
            except Exception:  # noqa: BLE001 — Redis trouble: the database poll still delivers
                message = None
                time.sleep(min(1.0, heartbeat_seconds))
            while message is not None and not state["done"]:
                if message.get("channel") == deltas_channel:
                    state["last_sent"] = time.monotonic()
                    data = message["data"]
                    preview = json.loads(data if isinstance(data, str) else data.decode())
                    yield _sse(preview["type"], preview)
                else:
                    last_poll = time.monotonic()
                    yield from flush()
                try:
                    message = pubsub.get_message(timeout=0)
                except Exception:  # noqa: BLE001
                    message = None
            if not state["done"] and time.monotonic() - last_poll >= STREAM_POLL_SECONDS:
                last_poll = time.monotonic()
                yield from flush()
            if not state["done"] and time.monotonic() - state["last_sent"] >= heartbeat_seconds:
                state["last_sent"] = time.monotonic()
                yield _sse("ping", {"type": "ping"})
    finally:
        try:
            pubsub.close()
            conn.close()
        finally:
            close_old_connections()


class SessionEventStreamApi(AgentsApi):
    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        event_deltas = query_list(request, "event_deltas")
        for kind in event_deltas:
            if kind not in ("agent.message", "agent.thinking"):
                raise InvalidRequest("event_deltas: only agent.message and agent.thinking.")
        response = StreamingHttpResponse(
            event_stream(
                session_id=session.id,
                heartbeat_seconds=settings.MANGO_SSE_HEARTBEAT_SECONDS,
                deltas="agent.message" in event_deltas,
            ),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
