"""Routes under /v1/ for dreams."""

from django.urls import path

from dreams import apis

urlpatterns = [
    path("dreams", apis.DreamListCreateApi.as_view()),
    path("dreams/<str:dream_id>", apis.DreamDetailApi.as_view()),
    path("dreams/<str:dream_id>/archive", apis.DreamArchiveApi.as_view()),
    path("dreams/<str:dream_id>/cancel", apis.DreamCancelApi.as_view()),
]
