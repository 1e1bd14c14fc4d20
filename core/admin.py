from django.contrib import admin

from core.models import ApiKey, Workspace


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("id", "name", "key_hint", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("id", "key_hint", "created_at", "last_used_at")
    can_delete = False
    show_change_link = True


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "created_at")
    search_fields = ("name", "id")
    readonly_fields = ("id", "created_at")
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("key_hint", "name", "workspace", "created_at", "last_used_at", "revoked_at")
    list_filter = ("workspace",)
    search_fields = ("id", "name", "key_hint", "workspace__name")
    readonly_fields = ("id", "key_hint", "created_at", "last_used_at")
    fields = ("id", "workspace", "name", "key_hint", "created_at", "last_used_at", "revoked_at")

    def has_add_permission(self, request):
        # Keys are minted by `manage.py create_api_key`, which shows the raw key once.
        return False
