"""/v1/sessions/{id}/events: send and list (the live stream, /events/stream, is sessions/streams.py)."""

import logging

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_list, query_time_range
from core.apiview import AgentsApi, query_order
from core.schema import time_range_parameters
from sessions.queue.auth import credential_kind
from sessions.selectors import session_event_list, session_get
from sessions.serializers.events import (
    EventListOutputSerializer,
    EventsSendInputSerializer,
    EventsSentOutputSerializer,
    event_to_wire,
    parse_events,
)
from sessions.services.user_events import session_events_send

PAGES = Paging(maximum=1000, default=1000)

logger = logging.getLogger(__name__)


EVENT_LIST_PARAMETERS = [
    *PAGES.parameters(),
    OpenApiParameter("order", str, enum=["asc", "desc"], description="By sequence; default asc."),
    OpenApiParameter("types[]", str, many=True),
    *time_range_parameters(),
]


def events_page(request, session) -> Response:
    """One page of a session's log as the list routes answer it (the session's and its thread's)."""
    rows, next_page = session_event_list(
        session=session,
        **PAGES.read(request),
        order=query_order(request, "asc"),
        types=query_list(request, "types"),
        processed=query_time_range(request, "created_at"),
    )
    return Response({"data": [event_to_wire(row) for row in rows], "next_page": next_page})


class SessionEventsApi(AgentsApi):
    @extend_schema(
        operation_id="sessions_events_send", request=EventsSendInputSerializer, responses=EventsSentOutputSerializer
    )
    def post(self, request, session_id: str):
        parsed = parse_events(request.data)
        rows = session_events_send(
            workspace=request.user,
            session_id=session_id,
            parsed=parsed,
            session_only=credential_kind(request.auth) == "work_token",
        )
        return Response({"data": [event_to_wire(row) for row in rows]})

    @extend_schema(
        operation_id="sessions_events_list", parameters=EVENT_LIST_PARAMETERS, responses=EventListOutputSerializer
    )
    def get(self, request, session_id: str):
        return events_page(request, session_get(workspace=request.user, session_id=session_id))
