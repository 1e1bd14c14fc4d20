# The skills models moved here from the sessions app (label agent_sessions): their tables stay where
# they are (Meta.db_table), so this migration changes only Django's state: `sqlmigrate skills 0001`
# prints no DDL. agent_sessions 0012 removes them from that app's state and moves their content types.

import django.db.models.deletion
import skills.models
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('agent_sessions', '0011_vaults'),
        ('core', '0002_apikey_expiry_and_hash_constraint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Skill',
                    fields=[
                        ('id', models.CharField(default=skills.models._skill_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('display_name', models.CharField(max_length=255)),
                        ('name', models.CharField(max_length=64)),
                        ('latest_version', models.CharField(blank=True, default='', max_length=32)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='skills', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_skill',
                    },
                ),
                migrations.CreateModel(
                    name='SkillVersion',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('version', models.CharField(max_length=32)),
                        ('name', models.CharField(max_length=64)),
                        ('description', models.TextField()),
                        ('files', models.JSONField(default=list)),
                        ('size_bytes', models.PositiveBigIntegerField(default=0)),
                        ('ready', models.BooleanField(default=False)),
                        ('created_at', models.DateTimeField()),
                        ('skill', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='skills.skill')),
                    ],
                    options={
                        'db_table': 'agent_sessions_skillversion',
                    },
                ),
                migrations.AddIndex(
                    model_name='skill',
                    index=models.Index(fields=['workspace', '-id'], name='skill_ws_id_desc'),
                ),
                migrations.AddConstraint(
                    model_name='skillversion',
                    constraint=models.UniqueConstraint(fields=('skill', 'version'), name='skill_version_unique'),
                ),
            ],
            database_operations=[],
        ),
    ]
