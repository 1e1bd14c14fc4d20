"""Routes under /v1/ for memory stores, their memories and the version log."""

from django.urls import path

from memory import apis

urlpatterns = [
    path("memory_stores", apis.MemoryStoreListCreateApi.as_view()),
    path("memory_stores/<str:memory_store_id>", apis.MemoryStoreDetailApi.as_view()),
    path("memory_stores/<str:memory_store_id>/archive", apis.MemoryStoreArchiveApi.as_view()),
    path("memory_stores/<str:memory_store_id>/memories", apis.MemoryListCreateApi.as_view()),
    path("memory_stores/<str:memory_store_id>/memories/<str:memory_id>", apis.MemoryDetailApi.as_view()),
    path("memory_stores/<str:memory_store_id>/memory_versions", apis.MemoryVersionListApi.as_view()),
    path(
        "memory_stores/<str:memory_store_id>/memory_versions/<str:memory_version_id>",
        apis.MemoryVersionDetailApi.as_view(),
    ),
    path(
        "memory_stores/<str:memory_store_id>/memory_versions/<str:memory_version_id>/redact",
        apis.MemoryVersionRedactApi.as_view(),
    ),
]
