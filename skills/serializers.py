"""Skills and skill versions: wire shapes (the SDK's BetaSkill, BetaSkillVersion and their
deleted forms)."""

from rest_framework import serializers

from core.api import rfc3339
from core.serializers import deleted_output, page_output

SKILL_DISPLAY_NAME_MAX_CHARS = 255


def skill_to_wire(skill) -> dict:
    return {
        "id": skill.id,
        "type": "skill",
        "display_name": skill.display_name,
        "latest_version_id": skill.latest_version,
        "source": {"type": "custom" if skill.workspace_id is not None else "anthropic"},
        "created_at": rfc3339(skill.created_at),
        "updated_at": rfc3339(skill.updated_at),
    }


def skill_version_to_wire(version) -> dict:
    return {
        "id": version.version,
        "type": "skill_version",
        "skill_id": version.skill_id,
        "name": version.name,
        "description": version.description,
        "created_at": rfc3339(version.created_at),
    }


class SkillSourceOutputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["custom", "anthropic", "anthropic_example", "plugin"])


class SkillOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill"])
    display_name = serializers.CharField()
    latest_version_id = serializers.CharField()
    source = SkillSourceOutputSerializer()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class SkillVersionOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_version"])
    skill_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()


class SkillUploadInputSerializer(serializers.Serializer):
    """multipart/form-data: `files[]` (or `files`), each named by its path inside the upload
    (`<skill-dir>/SKILL.md`, `<skill-dir>/scripts/x.py`, …), and an optional `display_name`."""

    files = serializers.ListField(child=serializers.FileField(), help_text="Sent as files[] parts.")
    display_name = serializers.CharField(required=False, max_length=SKILL_DISPLAY_NAME_MAX_CHARS)


SkillListOutputSerializer = page_output("SkillListOutputSerializer", SkillOutputSerializer)
SkillVersionListOutputSerializer = page_output("SkillVersionListOutputSerializer", SkillVersionOutputSerializer)
SkillDeletedOutputSerializer = deleted_output("SkillDeletedOutputSerializer", type="skill_deleted")
SkillVersionDeletedOutputSerializer = deleted_output(
    "SkillVersionDeletedOutputSerializer", type="skill_version_deleted"
)
