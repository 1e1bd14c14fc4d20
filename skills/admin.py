"""Skills per workspace with their versions, read-only: uploads go through the API."""

from django.contrib import admin

from core.adminkit import ReadOnlyInline, ReadOnlyModelAdmin
from skills.models import Skill, SkillVersion


class SkillVersionInline(ReadOnlyInline):
    model = SkillVersion
    fields = ("version", "name", "description", "file_count", "size_bytes", "ready", "created_at")
    readonly_fields = fields
    ordering = ("-version",)

    @admin.display(description="files")
    def file_count(self, obj):
        return len(obj.files)


@admin.register(Skill)
class SkillAdmin(ReadOnlyModelAdmin):
    """Skills per workspace with their versions (read-only: uploads go through the API)."""

    list_display = ("id", "display_name", "name", "workspace", "latest_version", "created_at")
    list_filter = ("workspace",)
    search_fields = ("id", "name", "display_name")
    readonly_fields = ("id", "workspace", "display_name", "name", "latest_version", "created_at", "updated_at")
    inlines = [SkillVersionInline]
