"""Custom skills: versioned directory uploads (SKILL.md and its files), each file one object in
the store. Tables keep their agent_sessions_* names (a state-only move).
"""

from django.db import models

from core.ids import new_id
from core.models import Workspace


def _skill_id() -> str:
    return new_id("skill")


class Skill(models.Model):
    """A custom skill: a versioned directory upload (SKILL.md and the files it refers to).
    `name` is the kebab-case slug from the first upload's frontmatter, the same for every
    version; `latest_version` the newest version's id (a skill always holds one)."""

    id = models.CharField(primary_key=True, max_length=64, default=_skill_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="skills")
    display_name = models.CharField(max_length=255)
    name = models.CharField(max_length=64)
    # Empty until the first version is ready: such a skill is not visible yet.
    latest_version = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "agent_sessions_skill"
        indexes = [models.Index(fields=["workspace", "-id"], name="skill_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.id} ({self.name})"


class SkillVersion(models.Model):
    """One immutable upload of a skill. `version` is its public id (microseconds since the epoch,
    increasing per skill). `files`: [{path (inside the skill's directory), size, sha256, key}],
    each file one object in the store."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=32)
    name = models.CharField(max_length=64)
    description = models.TextField()
    files = models.JSONField(default=list)
    size_bytes = models.PositiveBigIntegerField(default=0)
    # False while its objects are being written (the row comes first, naming their keys, so a
    # crash leaves nothing the sweep cannot find); only ready versions are visible.
    ready = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "agent_sessions_skillversion"
        constraints = [models.UniqueConstraint(fields=["skill", "version"], name="skill_version_unique")]

    def __str__(self) -> str:
        return f"{self.skill_id}@{self.version}"
