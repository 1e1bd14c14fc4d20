"""Admin: agents (with their versions), environments, and sessions with their event log, sandbox
state and errors. Everything is read-only: writes go through the API's services."""

import json

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import models
from django.template.response import TemplateResponse
from django.utils.html import format_html

import sandboxes as sandbox
from sessions.models import (
    Agent,
    AgentVersion,
    Environment,
    EnvironmentKey,
    Memory,
    MemoryStore,
    MemoryVersion,
    Session,
    Skill,
    SkillVersion,
    Vault,
    VaultCredential,
    WorkItem,
)
from sessions.services import work as work_services
from sessions.services.vaults import credential_revoke


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


EVENTS_PER_PAGE = 20


def _pretty(value) -> str:
    return format_html("<pre style='white-space:pre-wrap;margin:0'>{}</pre>", json.dumps(value, indent=2))


class AgentVersionInline(ReadOnlyInline):
    model = AgentVersion
    fields = ("version", "created_at", "config_pretty")
    readonly_fields = fields
    ordering = ("-version",)

    @admin.display(description="config")
    def config_pretty(self, obj):
        return _pretty(obj.config)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "workspace", "version", "created_at", "archived_at")
    list_filter = ("archived_at",)
    search_fields = ("id",)
    readonly_fields = ("id", "workspace", "version", "created_at", "updated_at", "archived_at")
    inlines = [AgentVersionInline]

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="name")
    def name(self, obj):
        version = obj.versions.filter(version=obj.version).first()
        return version.config.get("name") if version else ""

    def has_add_permission(self, request):
        return False


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "workspace", "kind", "created_at", "archived_at")
    search_fields = ("id", "name")
    readonly_fields = ("id", "workspace", "config", "created_at", "updated_at", "archived_at")

    @admin.display(description="type")
    def kind(self, obj):
        return obj.config.get("type")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


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
        return _pretty([{"seq": e.seq, **e.payload.get("error", {})} for e in rows])

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


class SkillVersionInline(ReadOnlyInline):
    model = SkillVersion
    fields = ("version", "name", "description", "file_count", "size_bytes", "ready", "created_at")
    readonly_fields = fields
    ordering = ("-version",)

    @admin.display(description="files")
    def file_count(self, obj):
        return len(obj.files)


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    """Skills per workspace with their versions (read-only: uploads go through the API)."""

    list_display = ("id", "display_name", "name", "workspace", "latest_version", "created_at")
    list_filter = ("workspace",)
    search_fields = ("id", "name", "display_name")
    readonly_fields = ("id", "workspace", "display_name", "name", "latest_version", "created_at", "updated_at")
    inlines = [SkillVersionInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MemoryStore)
class MemoryStoreAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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


class VaultCredentialInline(ReadOnlyInline):
    """Names, types, server URLs and last use; never a secret (the `secret` column is not shown)."""

    model = VaultCredential
    fields = ("id", "display_name", "auth_type", "mcp_server_url", "last_used_at", "archived_at")
    readonly_fields = fields


@admin.register(Vault)
class VaultAdmin(admin.ModelAdmin):
    list_display = ("id", "display_name", "workspace", "created_at", "archived_at")
    list_filter = ("workspace",)
    search_fields = ("id", "display_name")
    readonly_fields = ("id", "workspace", "display_name", "metadata", "created_at", "updated_at", "archived_at")
    inlines = [VaultCredentialInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(VaultCredential)
class VaultCredentialAdmin(admin.ModelAdmin):
    """Credentials per workspace, with revoke (archive and erase the stored secret). The secret
    is never a field here: not in the list, the form, nor the search."""

    list_display = (
        "id",
        "display_name",
        "auth_type",
        "mcp_server_url",
        "vault",
        "workspace",
        "last_used_at",
        "archived_at",
    )
    list_filter = ("workspace", "auth_type")
    search_fields = ("id", "display_name", "mcp_server_url")
    fields = (
        "id",
        "vault",
        "workspace",
        "display_name",
        "auth_type",
        "mcp_server_url",
        "metadata",
        "last_used_at",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = fields
    actions = ["revoke"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("secret")

    @admin.action(description="Revoke (archive and erase the secret)")
    def revoke(self, request, queryset):
        for credential in queryset.filter(archived_at__isnull=True):
            credential_revoke(credential=credential)
        self.message_user(request, "Revoked.")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
