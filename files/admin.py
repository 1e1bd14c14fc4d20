from datetime import timedelta
from urllib.parse import quote

from django.conf import settings
from django.contrib import admin, messages
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from core.adminkit import ReadOnlyModelAdmin
from files import reconcile, services, storage
from files.models import File, OwnedObject, StorageIntent


class ScopeFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"

    def lookups(self, request, model_admin):
        return [("top", "Top level"), ("session", "Session-scoped")]

    def queryset(self, request, queryset):
        if self.value() == "top":
            return queryset.filter(scope_session_id__isnull=True)
        if self.value() == "session":
            return queryset.filter(scope_session_id__isnull=False)
        return queryset


@admin.register(File)
class FileAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "filename",
        "workspace",
        "state",
        "origin",
        "scope_session_id",
        "downloadable",
        "size",
        "created_at",
        "expires_at",
    )
    list_filter = ("workspace", "state", ScopeFilter, "origin", "downloadable")
    search_fields = ("id", "filename")
    list_select_related = ("workspace",)
    show_full_result_count = False
    actions = ["delete_files"]

    fields = (
        "id", "filename", "workspace", "state", "origin", "size", "mime_type", "sha256", "downloadable",
        "download", "session", "output_path", "object_key", "created_at", "expires_at",
    )  # fmt: skip

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj):
        return format_html('<span title="{} bytes">{}</span>', obj.size_bytes, filesizeformat(obj.size_bytes))

    @admin.display(description="download")
    def download(self, obj):
        if not obj.downloadable or obj.state != File.State.READY:
            return "not downloadable (uploaded by a client: the Files API serves only outputs' bytes)"
        return format_html(
            '<a class="button" href="{}">Download {}</a>',
            reverse("admin:files_file_download", args=[obj.pk]),
            filesizeformat(obj.size_bytes),
        )

    @admin.display(description="session")
    def session(self, obj):
        if not obj.scope_session_id:
            return "— (top level)"
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:agent_sessions_session_change", args=[obj.scope_session_id]),
            obj.scope_session_id,
        )

    def get_urls(self):
        own = [
            path(
                "<path:object_id>/download/",
                self.admin_site.admin_view(self.download_view),
                name="files_file_download",
            )
        ]
        return own + super().get_urls()

    def download_view(self, request, object_id):
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        file = get_object_or_404(File, pk=object_id, state=File.State.READY, downloadable=True)
        body = storage.open_object(key=file.object_key)
        response = StreamingHttpResponse(storage.iter_object(body), content_type=file.mime_type)
        response["Content-Length"] = str(file.size_bytes)
        response["Content-Disposition"] = f"attachment; filename*=UTF-8''{quote(file.filename)}"
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        # The stock bulk delete would drop rows and leak their objects.
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Delete selected files (object and row)", permissions=["delete"])
    def delete_files(self, request, queryset):
        deleted = 0
        for file in queryset.filter(state=File.State.READY):
            services.file_delete(file=file)
            deleted += 1
        self.message_user(request, f"Deleted {deleted} file(s).", messages.SUCCESS)

    def delete_model(self, request, obj):
        if obj.state == File.State.READY:
            services.file_delete(file=obj)

    def delete_queryset(self, request, queryset):
        for file in queryset.filter(state=File.State.READY):
            services.file_delete(file=file)


class IdleFilter(admin.SimpleListFilter):
    """How long since the intent's owner last touched it; past the grace window it is stuck
    (its process died) and "reconcile now" finishes it."""

    title = "idle for"
    parameter_name = "idle"

    def lookups(self, request, model_admin):
        return [("recent", "under 1 minute"), ("grace", "under the grace window"), ("stuck", "longer (stuck)")]

    def queryset(self, request, queryset):
        now = timezone.now()
        grace = now - timedelta(seconds=settings.MANGO_RECONCILE_GRACE_SECONDS)
        if self.value() == "recent":
            return queryset.filter(updated_at__gt=now - timedelta(minutes=1))
        if self.value() == "grace":
            return queryset.filter(updated_at__lte=now - timedelta(minutes=1), updated_at__gt=grace)
        if self.value() == "stuck":
            return queryset.filter(updated_at__lte=grace)
        return queryset


@admin.register(StorageIntent)
class StorageIntentAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "state", "idle", "error", "owner", "attempts", "workspace", "file_id", "object_key")
    list_filter = ("state", "kind", IdleFilter, "workspace")
    list_select_related = ("workspace",)
    search_fields = ("object_key", "file_id", "upload_id")
    actions = ["reconcile_now"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    @admin.display(description="idle", ordering="updated_at")
    def idle(self, obj):
        seconds = (timezone.now() - obj.updated_at).total_seconds()
        stuck = obj.state == StorageIntent.State.OPEN and seconds > settings.MANGO_RECONCILE_GRACE_SECONDS
        text = f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"
        return format_html('<strong class="mango-flag">{} (stuck)</strong>', text) if stuck else text

    @admin.display(description="last error")
    def error(self, obj):
        if not obj.last_error:
            return ""
        return format_html('<span title="{}">{}</span>', obj.last_error, obj.last_error[:80])

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(
        description="Reconcile now (intents whose owner is dead, or ownerless and idle)", permissions=["view"]
    )
    def reconcile_now(self, request, queryset):
        ids = list(queryset.filter(state=StorageIntent.State.OPEN).values_list("pk", flat=True))
        report = reconcile.reconcile(intent_ids=ids)
        finished = report.uploads_rolled_back + report.uploads_already_committed + report.deletes_finished
        skipped = len(ids) - finished - report.deferred
        self.message_user(
            request,
            f"Finished {finished} intent(s); {report.deferred} deferred (object store unreachable); "
            f"{skipped} skipped (owner alive, or ownerless and still within the grace window).",
            messages.SUCCESS if not report.deferred else messages.WARNING,
        )


@admin.register(OwnedObject)
class OwnedObjectAdmin(ReadOnlyModelAdmin):
    """Objects other apps own (skill files): shown, never changed here (their owner deletes them)."""

    list_display = ("object_key", "owner_kind", "owner_id", "state", "size", "workspace", "created_at")
    list_filter = ("owner_kind", "state")
    search_fields = ("object_key", "owner_id", "sha256")

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj: OwnedObject) -> str:
        return filesizeformat(obj.size_bytes)
