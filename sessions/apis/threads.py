"""/v1/sessions/{id}/threads: a session's threads. Every session has its primary thread, whose
log is the session's; a multiagent session also has the child threads its coordinator spawned,
each a session row of its own (Session.primary) with its own log: list, retrieve, archive (a
child thread; the primary is archived with its session), and each thread's events (the stream,
.../threads/{id}/stream, is sessions/streams)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import Paging, query_list, rfc3339
from core.apiview import AgentsApi
from core.errors import InvalidRequest
from core.serializers import page_output
from sessions.apis.events import EVENT_LIST_PARAMETERS, events_page
from sessions.events import thread_id_of, usage_snapshot
from sessions.selectors import session_first_running_at, session_get, session_thread_get, session_threads
from sessions.serializers.events import EventListOutputSerializer
from sessions.serializers.sessions import SESSION_STATUSES, SessionStatsOutputSerializer
from sessions.services.threads import thread_archive

PAGES = Paging(maximum=1000, default=1000)


class ThreadStatsOutputSerializer(SessionStatsOutputSerializer):
    startup_seconds = serializers.FloatField(allow_null=True)


class ThreadOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["session_thread"])
    session_id = serializers.CharField()
    parent_thread_id = serializers.CharField(allow_null=True)
    agent = serializers.DictField()
    status = serializers.ChoiceField(choices=SESSION_STATUSES)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)
    stats = ThreadStatsOutputSerializer(allow_null=True)
    usage = serializers.DictField(allow_null=True)
    workflow_run_id = serializers.CharField(allow_null=True)


ThreadListOutputSerializer = page_output("ThreadListOutputSerializer", ThreadOutputSerializer)


def thread_to_wire(session) -> dict:
    """As the SDK documents the thread: `stats` null until its first status transition (a turn
    started, or the session ended), with `startup_seconds` from its creation to its first turn's
    start (zero for a child thread); `usage` null until its first idle (a turn ended: only a
    finished turn adds to active_seconds)."""
    moved = session.status != "idle" or session.active_seconds > 0
    startup = None
    if session.primary_id:
        startup = 0.0  # a child thread starts as it is spawned: the SDK's startup_seconds is zero
    elif moved and (first_running := session_first_running_at(session_id=session.id)) is not None:
        startup = (first_running - session.created_at).total_seconds()
    return {
        "id": thread_id_of(session.id),
        "type": "session_thread",
        "session_id": session.primary_id or session.id,
        "parent_thread_id": thread_id_of(session.primary_id) if session.primary_id else None,
        "agent": _agent_view(session.agent_snapshot),
        "status": session.status,
        "created_at": rfc3339(session.created_at),
        "updated_at": rfc3339(session.updated_at),
        "archived_at": rfc3339(session.archived_at),
        "stats": {
            "active_seconds": round(session.active_seconds, 3),
            "duration_seconds": round((timezone.now() - session.created_at).total_seconds(), 3),
            "startup_seconds": round(startup, 3) if startup is not None else None,
        }
        if moved
        else None,
        "usage": usage_snapshot(session.usage or {}, active_seconds=session.active_seconds)
        if session.active_seconds > 0
        else None,
        "workflow_run_id": session.workflow_run_id,
    }


def _thread_session(request, session_id: str, thread_id: str):
    """The session row that runs the thread (the session itself for its primary thread)."""
    return session_thread_get(session=session_get(workspace=request.user, session_id=session_id), thread_id=thread_id)


class SessionThreadsApi(AgentsApi):
    @extend_schema(
        operation_id="sessions_threads_list",
        parameters=[*PAGES.parameters(), OpenApiParameter("statuses[]", str, many=True, enum=list(SESSION_STATUSES))],
        responses=ThreadListOutputSerializer,
    )
    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        PAGES.read(request)  # the bounds still apply; one thread is one page
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in SESSION_STATUSES:
                raise InvalidRequest(f"statuses: {status[:40]!r} is not one of {', '.join(SESSION_STATUSES)}.")
        threads = [
            thread_to_wire(thread)
            for thread in session_threads(session=session)
            if not statuses or thread.status in statuses
        ]
        return Response({"data": threads, "next_page": None})


class SessionThreadDetailApi(AgentsApi):
    @extend_schema(operation_id="sessions_threads_retrieve", responses=ThreadOutputSerializer)
    def get(self, request, session_id: str, thread_id: str):
        return Response(thread_to_wire(_thread_session(request, session_id, thread_id)))


class SessionThreadArchiveApi(AgentsApi):
    @extend_schema(operation_id="sessions_threads_archive", request=None, responses=ThreadOutputSerializer)
    def post(self, request, session_id: str, thread_id: str):
        thread = _thread_session(request, session_id, thread_id)
        if thread.primary_id is None:
            raise InvalidRequest(
                "The primary thread cannot be archived on its own;"
                " archive the session (POST /v1/sessions/{id}/archive)."
            )
        return Response(thread_to_wire(thread_archive(thread=thread)))


class SessionThreadEventsApi(AgentsApi):
    @extend_schema(
        operation_id="sessions_threads_events_list",
        parameters=EVENT_LIST_PARAMETERS,
        responses=EventListOutputSerializer,
    )
    def get(self, request, session_id: str, thread_id: str):
        return events_page(request, _thread_session(request, session_id, thread_id))


def _agent_view(snapshot: dict) -> dict:
    """The thread's agent as the SDK shows it: an advisor thread's as BetaManagedAgentsAdvisor
    ({type: advisor, model: its id}), any other's as kept."""
    if snapshot.get("type") == "advisor":
        return {"type": "advisor", "model": snapshot["model"]["id"]}
    return snapshot
