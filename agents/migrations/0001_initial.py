# The agents models moved here from the sessions app (label agent_sessions): their tables stay where
# they are (Meta.db_table), so this migration changes only Django's state: `sqlmigrate agents 0001`
# prints no DDL. agent_sessions 0012 removes them from that app's state and moves their content types.

import agents.models
import core.models
import django.db.models.deletion
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
                    name='Agent',
                    fields=[
                        ('id', models.CharField(default=agents.models._agent_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('version', models.PositiveIntegerField(default=1)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('archived_at', models.DateTimeField(blank=True, null=True)),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='agents', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_agent',
                    },
                    bases=(core.models.Archivable, models.Model),
                ),
                migrations.CreateModel(
                    name='AgentVersion',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('version', models.PositiveIntegerField()),
                        ('config', models.JSONField()),
                        ('created_at', models.DateTimeField()),
                        ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='agents.agent')),
                    ],
                    options={
                        'db_table': 'agent_sessions_agentversion',
                    },
                ),
                migrations.CreateModel(
                    name='Environment',
                    fields=[
                        ('id', models.CharField(default=agents.models._environment_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('name', models.CharField(max_length=255)),
                        ('description', models.TextField(blank=True, null=True)),
                        ('config', models.JSONField()),
                        ('metadata', models.JSONField(default=dict)),
                        ('scope', models.CharField(blank=True, max_length=32, null=True)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('archived_at', models.DateTimeField(blank=True, null=True)),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='environments', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_environment',
                    },
                    bases=(core.models.Archivable, models.Model),
                ),
                migrations.AddIndex(
                    model_name='agent',
                    index=models.Index(fields=['workspace', '-id'], name='agent_ws_id_desc'),
                ),
                migrations.AddConstraint(
                    model_name='agentversion',
                    constraint=models.UniqueConstraint(fields=('agent', 'version'), name='agent_version_unique'),
                ),
                migrations.AddIndex(
                    model_name='environment',
                    index=models.Index(fields=['workspace', '-id'], name='env_ws_id_desc'),
                ),
            ],
            database_operations=[],
        ),
    ]
