"""Dreams, read-only (they are managed through the API)."""

from django.contrib import admin

from core.adminkit import ReadOnlyModelAdmin
from dreams.models import Dream


@admin.register(Dream)
class DreamAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "workspace", "status", "output_behavior", "memory_store_id", "output_store_id", "session_id")
    list_filter = ("status", "workspace")
    search_fields = ("id", "session_id", "memory_store_id", "output_store_id")
