"""Memory stores with their sizes, read-only: memories change through the API and write-back."""

from django.contrib import admin
from django.db import models

from core.adminkit import ReadOnlyModelAdmin
from memory.models import Memory, MemoryStore, MemoryVersion


@admin.register(MemoryStore)
class MemoryStoreAdmin(ReadOnlyModelAdmin):
    """Memory stores per workspace with their size (bytes of current content) and counts of
    memories and versions (read-only: memories change through the API and write-back)."""

    list_display = (
        "id",
        "name",
        "workspace",
        "memory_count",
        "size_bytes",
        "version_count",
        "archived_at",
        "created_at",
    )
    list_filter = ("workspace",)
    search_fields = ("id", "name")
    readonly_fields = ("id", "workspace", "name", "description", "metadata", "created_at", "updated_at", "archived_at")

    def get_queryset(self, request):
        # One subquery each: joining both memories and versions would multiply the sums.
        def per_store(model, value):
            rows = model.objects.filter(store=models.OuterRef("pk")).order_by().values("store")
            return models.Subquery(rows.annotate(total=value).values("total"))

        return (
            super()
            .get_queryset(request)
            .annotate(
                _memories=per_store(Memory, models.Count("id")),
                _bytes=per_store(Memory, models.Sum("content_size_bytes")),
                _versions=per_store(MemoryVersion, models.Count("id")),
            )
        )

    @admin.display(description="memories", ordering="_memories")
    def memory_count(self, obj):
        return obj._memories or 0

    @admin.display(description="size (bytes)", ordering="_bytes")
    def size_bytes(self, obj):
        return obj._bytes or 0

    @admin.display(description="versions", ordering="_versions")
    def version_count(self, obj):
        return obj._versions or 0
