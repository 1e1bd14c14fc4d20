"""What the apps' admin pages share: read-only inlines and model pages, JSON shown readably."""

import json

from django.contrib import admin
from django.utils.html import format_html


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """A page that shows rows and never adds, changes or deletes them (they change through the API)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def pretty_json(value) -> str:
    return format_html("<pre style='white-space:pre-wrap;margin:0'>{}</pre>", json.dumps(value, indent=2))
