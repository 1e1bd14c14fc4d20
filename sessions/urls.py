"""Routes under /v1/: no trailing slashes; updates are POST (api-contract.md §0)."""

from django.urls import path

from sessions import streams
from sessions.apis import events, models, resources, sessions, threads
from sessions.queue import apis as work

urlpatterns = [
    path("models", models.ModelListApi.as_view()),
    path("models/<str:model_id>", models.ModelDetailApi.as_view()),
    path("environments/<str:environment_id>/work", work.WorkListApi.as_view()),
    path("environments/<str:environment_id>/work/poll", work.WorkPollApi.as_view()),
    path("environments/<str:environment_id>/work/stats", work.WorkStatsApi.as_view()),
    path("environments/<str:environment_id>/work/<str:work_id>", work.WorkDetailApi.as_view()),
    path("environments/<str:environment_id>/work/<str:work_id>/ack", work.WorkAckApi.as_view()),
    path("environments/<str:environment_id>/work/<str:work_id>/heartbeat", work.WorkHeartbeatApi.as_view()),
    path("environments/<str:environment_id>/work/<str:work_id>/stop", work.WorkStopApi.as_view()),
    path("sessions", sessions.SessionListCreateApi.as_view()),
    path("sessions/<str:session_id>", sessions.SessionDetailApi.as_view()),
    path("sessions/<str:session_id>/archive", sessions.SessionArchiveApi.as_view()),
    path("sessions/<str:session_id>/resources", resources.SessionResourcesApi.as_view()),
    path("sessions/<str:session_id>/resources/<str:resource_id>", resources.SessionResourceDetailApi.as_view()),
    path("sessions/<str:session_id>/events", events.SessionEventsApi.as_view()),
    path("sessions/<str:session_id>/events/stream", streams.event_stream_view),
    path("sessions/<str:session_id>/threads", threads.SessionThreadsApi.as_view()),
    path("sessions/<str:session_id>/threads/<str:thread_id>", threads.SessionThreadDetailApi.as_view()),
    path("sessions/<str:session_id>/threads/<str:thread_id>/archive", threads.SessionThreadArchiveApi.as_view()),
    path("sessions/<str:session_id>/threads/<str:thread_id>/events", threads.SessionThreadEventsApi.as_view()),
    path("sessions/<str:session_id>/threads/<str:thread_id>/stream", streams.event_stream_view),
]
