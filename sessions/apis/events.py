"""/v1/sessions/{id}/events: send and list (the live stream, /events/stream, is sessions/streams.py)."""

import logging

from rest_framework.response import Response

from core.api import query_int, query_list, query_time_range
from sessions.apis.base import AgentsApi, query_order
from sessions.selectors import session_event_list, session_get
from sessions.serializers.events import event_to_wire, parse_events
from sessions.services.events import session_events_send

logger = logging.getLogger(__name__)


class SessionEventsApi(AgentsApi):
    def post(self, request, session_id: str):
        parsed = parse_events(request.data)
        rows = session_events_send(workspace=request.user, session_id=session_id, parsed=parsed)
        return Response({"data": [event_to_wire(row) for row in rows]})

    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        rows, next_page = session_event_list(
            session=session,
            limit=query_int(request, "limit", default=1000, minimum=1, maximum=1000),
            page=request.query_params.get("page"),
            order=query_order(request, "asc"),
            types=query_list(request, "types"),
            processed=query_time_range(request, "created_at"),
        )
        return Response({"data": [event_to_wire(row) for row in rows], "next_page": next_page})
