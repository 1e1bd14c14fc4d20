"""Agents (with their immutable versions) and environments, read-only: they change through the API."""

from django.contrib import admin

from agents.models import Agent, AgentVersion, Environment
from core.adminkit import ReadOnlyInline, ReadOnlyModelAdmin, pretty_json


class AgentVersionInline(ReadOnlyInline):
    model = AgentVersion
    fields = ("version", "created_at", "config_pretty")
    readonly_fields = fields
    ordering = ("-version",)

    @admin.display(description="config")
    def config_pretty(self, obj):
        return pretty_json(obj.config)


@admin.register(Agent)
class AgentAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "name", "workspace", "version", "created_at", "archived_at")
    list_filter = ("archived_at",)
    search_fields = ("id",)
    readonly_fields = ("id", "workspace", "version", "created_at", "updated_at", "archived_at")
    inlines = [AgentVersionInline]

    @admin.display(description="name")
    def name(self, obj):
        version = obj.versions.filter(version=obj.version).first()
        return version.config.get("name") if version else ""


@admin.register(Environment)
class EnvironmentAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "name", "workspace", "kind", "created_at", "archived_at")
    search_fields = ("id", "name")
    readonly_fields = ("id", "workspace", "config", "created_at", "updated_at", "archived_at")

    @admin.display(description="type")
    def kind(self, obj):
        return obj.config.get("type")
