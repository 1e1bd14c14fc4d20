"""Deployments and their runs, read-only (they are managed through the API)."""

from django.contrib import admin

from core.adminkit import ReadOnlyModelAdmin
from deployments.models import Deployment, DeploymentRun


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "name", "workspace", "schedule_expression", "schedule_timezone", "next_run_at", "paused_at")
    list_filter = ("workspace",)
    search_fields = ("id", "name")
    exclude = ("resource_secrets",)


@admin.register(DeploymentRun)
class DeploymentRunAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "deployment", "trigger_type", "scheduled_at", "session_id", "error", "created_at")
    list_filter = ("trigger_type", "workspace")
    search_fields = ("id", "deployment__id", "session_id")
