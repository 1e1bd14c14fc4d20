import hashlib
import secrets

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.ids import new_id

API_KEY_PREFIX = "sk-mango-"


def _workspace_id() -> str:
    return new_id("wrkspc")


def _api_key_id() -> str:
    return new_id("apikey")


def hash_api_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


class Archivable:
    """A row archived once: the first archive sets `archived_at`; archiving again changes nothing."""

    # Whether archiving counts as an update of the row; an agent's `updated_at` is its version's.
    archive_touches_updated_at = True

    def archive(self) -> None:
        if self.archived_at is not None:
            return
        self.archived_at = timezone.now()
        fields = ["archived_at"]
        if self.archive_touches_updated_at:
            self.updated_at = self.archived_at
            fields.append("updated_at")
        self.save(update_fields=fields)


class Workspace(models.Model):
    """The tenant. Every File, Agent, Environment and Session belongs to exactly one."""

    id = models.CharField(primary_key=True, max_length=40, default=_workspace_id, editable=False)
    name = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    # Lets DRF's IsAuthenticated treat an authenticated workspace as request.user.
    is_authenticated = True

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """An API key. Only its SHA-256 is stored; the raw key is shown once, at creation."""

    id = models.CharField(primary_key=True, max_length=40, default=_api_key_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=255, blank=True, default="")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=32, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Optional: the key stops authenticating at this time.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        constraints = [
            # A key row is only ever created with the SHA-256 of a raw key: never empty.
            models.CheckConstraint(condition=Q(key_hash__regex=r"^[0-9a-f]{64}$"), name="core_apikey_hash_is_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.key_hint}… ({self.workspace})"

    def status(self, now=None) -> str:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    @staticmethod
    def generate_raw_key() -> str:
        return API_KEY_PREFIX + secrets.token_urlsafe(32)
