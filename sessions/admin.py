"""Admin: sessions with their transcript (live while they run), sandbox state and errors, and the
self-hosted work queue's keys and items. Nothing is edited here: the actions (interrupt, archive,
delete, stop the sandbox) go through the same services as the API."""

from django.contrib import admin, messages
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agents.models import Environment
from core.adminkit import pretty_json
from sessions.dispatch import sandbox_remove_enqueue
from sessions.models import EnvironmentKey, Session, WorkItem
from sessions.queue import services as work_services
from sessions.services.sessions import session_archive, session_delete
from sessions.services.user_events import session_events_send
from sessions.toolhost import SELF_HOSTED
from sessions.transcript import transcript

# The transcript shows a session's latest events (the newest turn in view); older ones a page back.
TRANSCRIPT_EVENTS = 200
TRANSCRIPT_TEMPLATE = "admin/agent_sessions/session/transcript_items.html"
ACTIONS = {
    "interrupt": "Interrupt",
    "archive": "Archive",
    "delete": "Delete",
    "stop_sandbox": "Stop its sandbox",
}


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
    list_display = ("id", "agent_name", "environment_name", "workspace", "status", "sandbox_state", "created_at")
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
        "sandbox_checkpoint",
        "last_error",
        "errors",
        "environment_config",
        "agent_snapshot",
    )
    exclude = ()
    list_select_related = ("workspace", "agent")
    change_form_template = "admin/agent_sessions/session/change_form.html"

    @admin.display(description="sandbox")
    def sandbox_live(self, obj):
        """What the database knows (the API process never calls Docker: the workers do)."""
        if obj.sandbox_state == obj.SandboxState.RUNNING:
            return f"running: container {obj.sandbox_ref}"
        return obj.sandbox_state

    @admin.display(description="agent", ordering="agent")
    def agent_name(self, obj):
        return (obj.agent_snapshot or {}).get("name") or obj.agent_id

    @admin.display(description="environment")
    def environment_name(self, obj):
        return getattr(obj, "_environment_name", None) or obj.environment_id

    def get_queryset(self, request):
        names = Environment.objects.filter(id=OuterRef("environment_id")).values("name")[:1]
        return super().get_queryset(request).annotate(_environment_name=Subquery(names))

    @admin.display(description="sandbox checkpoint")
    def sandbox_checkpoint(self, obj):
        """The last committed checkpoint (what a wake restores): when, how large."""
        checkpoint = obj.sandbox_checkpoints.filter(state="committed").first()
        if checkpoint is None:
            return "none"
        return (
            f"{checkpoint.committed_at:%Y-%m-%d %H:%M:%S} UTC: {checkpoint.logical_bytes} bytes archived, "
            f"{checkpoint.stored_bytes} bytes stored in {len(set(checkpoint.chunk_ids()))} chunks"
        )

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

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/transcript/", view(self.transcript_view), name="agent_sessions_session_transcript"),
            path("<path:object_id>/act/<str:action>/", view(self.act_view), name="agent_sessions_session_act"),
            *super().get_urls(),
        ]

    def _session(self, request, object_id) -> Session:
        session = Session.objects.select_related("workspace").filter(pk=object_id).first()
        if session is None or not self.has_view_permission(request, session):
            raise Http404("No such session.")
        return session

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {**(extra_context or {})}
        session = Session.objects.filter(pk=object_id).first()
        if session is not None:
            events = session.events.order_by("-seq").only("seq", "type", "created_at", "payload")
            before = request.GET.get("before")
            if before and before.isdigit():
                events = events.filter(seq__lt=int(before))
            rows = list(events[:TRANSCRIPT_EVENTS])[::-1]
            extra["transcript"] = transcript(rows)
            extra["transcript_count"] = session.events.count()
            extra["transcript_earlier"] = rows[0].seq if rows and rows[0].seq > 1 else None
            extra["transcript_last_seq"] = rows[-1].seq if rows and not before else session.last_seq
            extra["transcript_live"] = not before and session.deleted_at is None
            extra["session_actions"] = [] if session.deleted_at else list(ACTIONS.items())
            extra["resources"] = list(session.resources.order_by("created_at", "id"))
        return super().change_view(request, object_id, form_url, extra)

    def transcript_view(self, request, object_id):
        """The live page's feed (the admin's own login, no API key): the transcript items of the
        events after `after`, rendered, and the session's status."""
        session = self._session(request, object_id)
        after = request.GET.get("after", "0")
        after = int(after) if after.isdigit() else 0
        rows = list(session.events.filter(seq__gt=after).order_by("seq")[:TRANSCRIPT_EVENTS])
        html = render_to_string(TRANSCRIPT_TEMPLATE, {"transcript": transcript(rows)}) if rows else ""
        return JsonResponse({"html": html, "last_seq": rows[-1].seq if rows else after, "status": session.status})

    def act_view(self, request, object_id, action):
        """An operator's action on a session, through the API's own services."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        session = self._session(request, object_id)
        if action not in ACTIONS or session.deleted_at is not None:
            raise Http404("No such action.")
        workspace = session.workspace
        if action == "interrupt":
            session_events_send(
                workspace=workspace, session_id=session.id, parsed=[{"type": "user.interrupt", "payload": {}}]
            )
        elif action == "archive":
            session_archive(workspace=workspace, session_id=session.id)
        elif action == "delete":
            session_delete(workspace=workspace, session_id=session.id)
            self.message_user(request, f"Session {session.id} deleted.")
            return redirect(reverse("admin:agent_sessions_session_changelist"))
        elif action == "stop_sandbox":
            sandbox_remove_enqueue(session_id=session.id)  # a worker removes it: the admin never calls Docker
        self.message_user(request, f"{ACTIONS[action]}: done.")
        return redirect(reverse("admin:agent_sessions_session_change", args=[session.id]))


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
            kwargs["queryset"] = Environment.objects.filter(config__type=SELF_HOSTED, archived_at__isnull=True)
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
