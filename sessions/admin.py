"""Admin: agents (with their versions), environments, and sessions with their event log, sandbox
state and errors. Everything is read-only: writes go through the API's services."""

import json

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.template.response import TemplateResponse

import sandboxes as sandbox
from agents.models import Environment
from core.adminkit import pretty_json
from sessions.models import EnvironmentKey, Session, WorkItem
from sessions.services import work as work_services

EVENTS_PER_PAGE = 20


class StatusFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("errors", "with errors"), ("deleted", "deleted"), ("live", "not deleted")]

    def queryset(self, request, queryset):
        if self.value() == "errors":
            return queryset.exclude(last_error__isnull=True).exclude(last_error="")
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        return queryset


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "workspace", "status", "agent", "sandbox_state", "last_error", "created_at", "deleted_at")
    list_filter = ("status", "sandbox_state", StatusFilter)
    search_fields = ("id", "title")
    readonly_fields = (
        "id",
        "workspace",
        "agent",
        "agent_version",
        "environment_id",
        "status",
        "title",
        "metadata",
        "usage",
        "active_seconds",
        "created_at",
        "updated_at",
        "archived_at",
        "deleted_at",
        "last_seq",
        "runner_token",
        "runner_heartbeat_at",
        "turn_started_at",
        "sandbox_state",
        "sandbox_ref",
        "sandbox_live",
        "last_error",
        "errors",
        "environment_config",
        "agent_snapshot",
    )
    exclude = ()
    list_select_related = ("workspace", "agent")
    change_form_template = "admin/agent_sessions/session/change_form.html"

    @admin.display(description="sandbox (live)")
    def sandbox_live(self, obj):
        return sandbox.describe(session_id=obj.id)

    @admin.display(description="session.error events")
    def errors(self, obj):
        rows = obj.events.filter(type="session.error").order_by("-seq")[:20]
        return pretty_json([{"seq": e.seq, **e.payload.get("error", {})} for e in rows])

    def has_add_permission(self, request):
        return False

    # Read-only: the view page has no Save or Delete buttons; writes go through the API.
    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {**(extra_context or {})}
        session = Session.objects.filter(pk=object_id).first()
        if session is not None:
            events = Paginator(
                session.events.order_by("seq").only("seq", "type", "processed_at", "created_at", "payload"),
                EVENTS_PER_PAGE,
            )
            page = events.get_page(request.GET.get("events_page"))
            extra["events_page"] = page
            extra["events_page_range"] = events.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
            extra["events_rows"] = [
                {"seq": e.seq, "type": e.type, "processed_at": e.processed_at, "created_at": e.created_at,
                 "payload": json.dumps(e.payload, ensure_ascii=False)}
                for e in page.object_list
            ]  # fmt: skip
            extra["resources"] = list(session.resources.order_by("created_at", "id"))
        return super().change_view(request, object_id, form_url, extra)


@admin.register(EnvironmentKey)
class EnvironmentKeyAdmin(admin.ModelAdmin):
    """Environment keys: created here (the raw key shown once, on the page that answers the form)
    or by `manage.py create_environment_key`; revoked with the action, never deleted."""

    list_display = (
        "key_hint",
        "name",
        "environment",
        "workspace",
        "status",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("workspace",)
    list_select_related = ("environment", "workspace")
    search_fields = ("id", "name", "key_hint", "environment__id", "environment__name")
    actions = ["revoke_keys"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("environment", "name")
        return (
            "id",
            "environment",
            "workspace",
            "name",
            "key_hint",
            "status",
            "created_at",
            "last_used_at",
            "revoked_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("id", "environment", "workspace", "key_hint", "status", "created_at", "last_used_at", "revoked_at")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "environment":
            kwargs["queryset"] = Environment.objects.filter(config__type="self_hosted", archived_at__isnull=True)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # revoke, don't delete: keep the audit trail
        return actions

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="status")
    def status(self, obj):
        return obj.status()

    @admin.action(description="Revoke selected environment keys", permissions=["change"])
    def revoke_keys(self, request, queryset):
        revoked = work_services.environment_key_revoke(keys=queryset)
        self.message_user(request, f"Revoked {revoked} environment key(s).", messages.SUCCESS)

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["name"])
            return
        created, raw_key = work_services.environment_key_issue(environment=obj.environment, name=obj.name)
        for name in ("id", "workspace_id", "key_hash", "key_hint", "created_at"):
            setattr(obj, name, getattr(created, name))
        obj._state.adding = False
        obj._raw_key = raw_key

    def response_add(self, request, obj, post_url_continue=None):
        # The raw key exists only in this response: no redirect, no message in the session.
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "environment_key": obj,
            "raw_key": obj._raw_key,
            "title": "Environment key created",
        }
        response = TemplateResponse(request, "admin/agent_sessions/environmentkey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response


@admin.register(WorkItem)
class WorkItemAdmin(admin.ModelAdmin):
    list_display = ("id", "environment", "session", "state", "created_at", "latest_heartbeat_at", "claims")
    list_filter = ("state",)
    search_fields = ("id", "session__id", "environment__id")
    readonly_fields = [f.name for f in WorkItem._meta.fields]
