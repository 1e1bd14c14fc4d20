"""Skill files stored before files.OwnedObject existed: one OwnedObject row for each object a
skill version names, so the orphan scan keeps them and reads find them (issue 41: the scan
deleted them). Their keys stay where they are (under files/)."""

from django.db import migrations


def own_skill_objects(apps, schema_editor):
    SkillVersion = apps.get_model("skills", "SkillVersion")
    OwnedObject = apps.get_model("files", "OwnedObject")
    rows = []
    for version in SkillVersion.objects.select_related("skill").iterator():
        for entry in version.files:
            if entry.get("key"):
                rows.append(
                    OwnedObject(
                        workspace_id=version.skill.workspace_id,
                        owner_kind="skill_version",
                        owner_id=str(version.pk),
                        object_key=entry["key"],
                        size_bytes=entry.get("size", 0),
                        sha256=entry.get("sha256", ""),
                    )
                )
    OwnedObject.objects.bulk_create(rows, batch_size=1000, ignore_conflicts=True)


def disown_skill_objects(apps, schema_editor):
    apps.get_model("files", "OwnedObject").objects.filter(owner_kind="skill_version").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("skills", "0001_initial"),
        ("files", "0005_owned_objects"),
    ]

    operations = [migrations.RunPython(own_skill_objects, disown_skill_objects)]
