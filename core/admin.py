"""Workspaces and the API key lifecycle: create (the raw key is shown once, on the page that
answers the form, and stored nowhere), revoke as an action, optional expiry, last use."""

from django.contrib import admin, messages
from django.db.models import Count, Q, Sum
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from core import services
from core.models import ApiKey, Workspace


class ApiKeyInline(admin.TabularInline):
    """Keys of a workspace, read-only: keys are created on the API key page (which mints the
    hash and shows the raw key once), never by typing into an inline row."""

    model = ApiKey
    extra = 0
    fields = ("key_hint", "name", "status", "created_at", "expires_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="status")
    def status(self, obj):
        return obj.status()


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "created_at", "file_count", "storage_used", "keys_link", "files_link")
    search_fields = ("name", "id")
    readonly_fields = ("id", "created_at", "file_count", "storage_used", "keys_link", "files_link")
    inlines = [ApiKeyInline]

    def get_queryset(self, request):
        # Storage used per workspace: visible Files only, in one query with the list.
        ready = Q(files__state="ready")
        return (
            super()
            .get_queryset(request)
            .annotate(file_count=Count("files", filter=ready), file_bytes=Sum("files__size_bytes", filter=ready))
        )

    @admin.display(description="files", ordering="file_count")
    def file_count(self, obj):
        return obj.file_count

    @admin.display(description="storage used", ordering="file_bytes")
    def storage_used(self, obj):
        return format_html('<span title="{} bytes">{}</span>', obj.file_bytes or 0, filesizeformat(obj.file_bytes or 0))

    @admin.display(description="API keys")
    def keys_link(self, obj):
        if obj.pk is None:
            return "-"
        add = reverse("admin:core_apikey_add") + f"?workspace={obj.pk}"
        listing = reverse("admin:core_apikey_changelist") + f"?workspace__id__exact={obj.pk}"
        return format_html('<a href="{}">keys</a> · <a href="{}">create a key</a>', listing, add)

    @admin.display(description="files")
    def files_link(self, obj):
        if obj.pk is None:
            return "-"
        return format_html(
            '<a href="{}?workspace__id__exact={}">files</a>', reverse("admin:files_file_changelist"), obj.pk
        )


class KeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("revoked", "revoked"), ("expired", "expired")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("key_hint", "name", "workspace", "status", "created_at", "expires_at", "last_used_at", "revoked_at")
    list_filter = (KeyStatusFilter, "workspace")
    list_select_related = ("workspace",)
    search_fields = ("id", "name", "key_hint", "workspace__name")
    actions = ["revoke_keys"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("workspace", "name", "expires_at")
        return (
            "id",
            "workspace",
            "name",
            "key_hint",
            "status",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        # Only the label and the expiry change after creation; revoking is the action.
        return ("id", "workspace", "key_hint", "status", "created_at", "last_used_at", "revoked_at")

    def get_changeform_initial_data(self, request):
        return {"workspace": request.GET.get("workspace")}

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # revoke, don't delete: keep the audit trail
        return actions

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="status")
    def status(self, obj):
        return obj.status()

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_keys(self, request, queryset):
        revoked = services.api_key_revoke(api_keys=queryset)
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["name", "expires_at"])
            return
        created, raw_key = services.api_key_issue(workspace=obj.workspace, name=obj.name, expires_at=obj.expires_at)
        for field in ("id", "key_hash", "key_hint", "created_at"):
            setattr(obj, field, getattr(created, field))
        obj._state.adding = False
        obj._raw_key = raw_key

    def response_add(self, request, obj, post_url_continue=None):
        # The raw key exists only in this response: no redirect, no message in the session.
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "api_key": obj,
            "raw_key": obj._raw_key,
            "title": "API key created",
        }
        response = TemplateResponse(request, "admin/core/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response
