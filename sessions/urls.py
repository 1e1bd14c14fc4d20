"""Routes under /v1/: no trailing slashes; updates are POST (api-contract.md §0)."""

from django.urls import path

from sessions import apis

urlpatterns = [
    path("agents", apis.AgentListCreateApi.as_view()),
    path("agents/<str:agent_id>", apis.AgentDetailApi.as_view()),
    path("agents/<str:agent_id>/archive", apis.AgentArchiveApi.as_view()),
    path("agents/<str:agent_id>/versions", apis.AgentVersionsApi.as_view()),
    path("environments", apis.EnvironmentListCreateApi.as_view()),
    path("environments/<str:environment_id>", apis.EnvironmentDetailApi.as_view()),
    path("environments/<str:environment_id>/archive", apis.EnvironmentArchiveApi.as_view()),
    path("sessions", apis.SessionListCreateApi.as_view()),
    path("sessions/<str:session_id>", apis.SessionDetailApi.as_view()),
    path("sessions/<str:session_id>/archive", apis.SessionArchiveApi.as_view()),
    path("sessions/<str:session_id>/resources", apis.SessionResourcesApi.as_view()),
    path("sessions/<str:session_id>/resources/<str:resource_id>", apis.SessionResourceDetailApi.as_view()),
    path("sessions/<str:session_id>/events", apis.SessionEventsApi.as_view()),
    path("sessions/<str:session_id>/events/stream", apis.SessionEventStreamApi.as_view()),
]
