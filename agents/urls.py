"""Routes under /v1/ for agents and environments (an environment's work queue is sessions')."""

from django.urls import path

from agents import apis

urlpatterns = [
    path("agents", apis.AgentListCreateApi.as_view()),
    path("agents/<str:agent_id>", apis.AgentDetailApi.as_view()),
    path("agents/<str:agent_id>/archive", apis.AgentArchiveApi.as_view()),
    path("agents/<str:agent_id>/versions", apis.AgentVersionsApi.as_view()),
    path("environments", apis.EnvironmentListCreateApi.as_view()),
    path("environments/<str:environment_id>", apis.EnvironmentDetailApi.as_view()),
    path("environments/<str:environment_id>/archive", apis.EnvironmentArchiveApi.as_view()),
]
