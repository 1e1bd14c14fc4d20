from django.urls import path

from files import apis

# No trailing slashes: the SDK never sends one (api-contract.md §0).
urlpatterns = [
    path("files", apis.FileListCreateApi.as_view(), name="files"),
    path("files/<str:file_id>", apis.FileDetailApi.as_view(), name="file"),
    path("files/<str:file_id>/content", apis.FileContentApi.as_view(), name="file-content"),
]
