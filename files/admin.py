from django.contrib import admin, messages

from files import reconcile, services
from files.models import File, StorageIntent


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
        "size_bytes",
        "created_at",
        "expires_at",
    )
    list_filter = ("workspace", "state", ScopeFilter, "origin", "downloadable")
    search_fields = ("id", "filename")
    list_select_related = ("workspace",)
    show_full_result_count = False
    actions = ["delete_files"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

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


@admin.register(StorageIntent)
class StorageIntentAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "state", "workspace", "object_key", "file_id", "attempts", "updated_at", "last_error")
    list_filter = ("kind", "state", "workspace")
    search_fields = ("object_key", "file_id", "upload_id")
    actions = ["reconcile_now"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Reconcile now (intents idle longer than the grace window)", permissions=["view"])
    def reconcile_now(self, request, queryset):
        ids = list(queryset.filter(state=StorageIntent.State.OPEN).values_list("pk", flat=True))
        report = reconcile.reconcile(intent_ids=ids)
        finished = report.uploads_rolled_back + report.uploads_already_committed + report.deletes_finished
        skipped = len(ids) - finished - report.deferred
        self.message_user(
            request,
            f"Finished {finished} intent(s); {report.deferred} deferred (object store unreachable); "
            f"{skipped} skipped (still within the grace window: may be live).",
            messages.SUCCESS if not report.deferred else messages.WARNING,
        )
