# Agents, environments, vaults, memory stores and skills moved to apps of their own (agents/,
# vaults/, memory/, skills/; their 0001 migrations create them in Django's state only). Their tables
# keep their names, so this migration changes no table either: it removes the models from this app's
# state, points the foreign keys at their new apps, and moves the models' content types (and with
# them admin permissions and log entries) to the new app labels.

import django.db.models.deletion
from django.db import migrations, models

MOVED = {
    "agent": "agents",
    "agentversion": "agents",
    "environment": "agents",
    "vault": "vaults",
    "vaultcredential": "vaults",
    "memorystore": "memory",
    "memory": "memory",
    "memoryversion": "memory",
    "skill": "skills",
    "skillversion": "skills",
}


def content_types_follow(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        old = ContentType.objects.filter(app_label="agent_sessions", model=model).first()
        if old is None:
            continue
        new = ContentType.objects.filter(app_label=app_label, model=model).first()
        if new is not None:
            # Made by a post_migrate that ran in between: the old one keeps the permissions and log entries.
            new.delete()
        old.app_label = app_label
        old.save(update_fields=["app_label"])


def content_types_return(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        ContentType.objects.filter(app_label=app_label, model=model).update(app_label="agent_sessions")


class Migration(migrations.Migration):

    dependencies = [
        ("agent_sessions", "0011_vaults"),
        ("agents", "0001_initial"),
        ("memory", "0001_initial"),
        ("skills", "0001_initial"),
        ("vaults", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='agent',
                    name='workspace',
                ),
                migrations.RemoveField(
                    model_name='agentversion',
                    name='agent',
                ),
                migrations.AlterField(
                    model_name='session',
                    name='agent',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='sessions', to='agents.agent'),
                ),
                migrations.RemoveField(
                    model_name='environment',
                    name='workspace',
                ),
                migrations.AlterField(
                    model_name='workitem',
                    name='environment',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='work_items', to='agents.environment'),
                ),
                migrations.AlterField(
                    model_name='environmentkey',
                    name='environment',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='keys', to='agents.environment'),
                ),
                migrations.RemoveField(
                    model_name='memory',
                    name='store',
                ),
                migrations.RemoveField(
                    model_name='memorystore',
                    name='workspace',
                ),
                migrations.RemoveField(
                    model_name='memoryversion',
                    name='store',
                ),
                migrations.RemoveField(
                    model_name='skill',
                    name='workspace',
                ),
                migrations.RemoveField(
                    model_name='skillversion',
                    name='skill',
                ),
                migrations.RemoveField(
                    model_name='vault',
                    name='workspace',
                ),
                migrations.RemoveField(
                    model_name='vaultcredential',
                    name='vault',
                ),
                migrations.RemoveField(
                    model_name='vaultcredential',
                    name='workspace',
                ),
                migrations.DeleteModel(
                    name='AgentVersion',
                ),
                migrations.DeleteModel(
                    name='Agent',
                ),
                migrations.DeleteModel(
                    name='Environment',
                ),
                migrations.DeleteModel(
                    name='Memory',
                ),
                migrations.DeleteModel(
                    name='MemoryStore',
                ),
                migrations.DeleteModel(
                    name='MemoryVersion',
                ),
                migrations.DeleteModel(
                    name='Skill',
                ),
                migrations.DeleteModel(
                    name='SkillVersion',
                ),
                migrations.DeleteModel(
                    name='Vault',
                ),
                migrations.DeleteModel(
                    name='VaultCredential',
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
