"""Routes under /v1/ for skills and their versions."""

from django.urls import path

from skills import apis

urlpatterns = [
    path("skills", apis.SkillListCreateApi.as_view()),
    path("skills/<str:skill_id>", apis.SkillDetailApi.as_view()),
    path("skills/<str:skill_id>/versions", apis.SkillVersionListCreateApi.as_view()),
    path("skills/<str:skill_id>/versions/<str:version>", apis.SkillVersionDetailApi.as_view()),
    path("skills/<str:skill_id>/versions/<str:version>/content", apis.SkillVersionContentApi.as_view()),
]
