"""Routes under /v1/ for deployments and their runs."""

from django.urls import path

from deployments import apis

urlpatterns = [
    path("deployments", apis.DeploymentListCreateApi.as_view()),
    path("deployments/<str:deployment_id>", apis.DeploymentDetailApi.as_view()),
    path("deployments/<str:deployment_id>/archive", apis.DeploymentArchiveApi.as_view()),
    path("deployments/<str:deployment_id>/pause", apis.DeploymentPauseApi.as_view()),
    path("deployments/<str:deployment_id>/unpause", apis.DeploymentUnpauseApi.as_view()),
    path("deployments/<str:deployment_id>/run", apis.DeploymentRunNowApi.as_view()),
    path("deployment_runs", apis.DeploymentRunListApi.as_view()),
    path("deployment_runs/<str:deployment_run_id>", apis.DeploymentRunDetailApi.as_view()),
]
