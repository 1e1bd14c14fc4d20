# The memory models moved here from the sessions app (label agent_sessions): their tables stay where
# they are (Meta.db_table), so this migration changes only Django's state: `sqlmigrate memory 0001`
# prints no DDL. agent_sessions 0012 removes them from that app's state and moves their content types.

import core.models
import django.db.models.deletion
import memory.models
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
                    name='MemoryStore',
                    fields=[
                        ('id', models.CharField(default=memory.models._memory_store_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('name', models.CharField(max_length=255)),
                        ('description', models.TextField(blank=True, default='')),
                        ('metadata', models.JSONField(default=dict)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('archived_at', models.DateTimeField(blank=True, null=True)),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memory_stores', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_memorystore',
                    },
                    bases=(core.models.Archivable, models.Model),
                ),
                migrations.CreateModel(
                    name='Memory',
                    fields=[
                        ('id', models.CharField(default=memory.models._memory_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('path', models.TextField(db_collation='C')),
                        ('content', models.TextField(blank=True, default='')),
                        ('content_sha256', models.CharField(max_length=64)),
                        ('content_size_bytes', models.PositiveIntegerField()),
                        ('version_id', models.CharField(max_length=64)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('store', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memories', to='memory.memorystore')),
                    ],
                    options={
                        'db_table': 'agent_sessions_memory',
                    },
                ),
                migrations.CreateModel(
                    name='MemoryVersion',
                    fields=[
                        ('id', models.CharField(default=memory.models._memory_version_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('memory_id', models.CharField(max_length=64)),
                        ('operation', models.CharField(choices=[('created', 'Created'), ('modified', 'Modified'), ('deleted', 'Deleted')], max_length=16)),
                        ('path', models.TextField(blank=True, db_collation='C', null=True)),
                        ('content', models.TextField(blank=True, null=True)),
                        ('content_sha256', models.CharField(blank=True, max_length=64, null=True)),
                        ('content_size_bytes', models.PositiveIntegerField(blank=True, null=True)),
                        ('created_by', models.JSONField(blank=True, null=True)),
                        ('api_key_id', models.CharField(blank=True, max_length=64, null=True)),
                        ('session_id', models.CharField(blank=True, max_length=64, null=True)),
                        ('redacted_at', models.DateTimeField(blank=True, null=True)),
                        ('redacted_by', models.JSONField(blank=True, null=True)),
                        ('created_at', models.DateTimeField()),
                        ('store', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='versions', to='memory.memorystore')),
                    ],
                    options={
                        'db_table': 'agent_sessions_memoryversion',
                    },
                ),
                migrations.AddIndex(
                    model_name='memorystore',
                    index=models.Index(fields=['workspace', '-id'], name='memstore_ws_id_desc'),
                ),
                migrations.AddConstraint(
                    model_name='memory',
                    constraint=models.UniqueConstraint(fields=('store', 'path'), name='memory_store_path_unique'),
                ),
                migrations.AddIndex(
                    model_name='memoryversion',
                    index=models.Index(fields=['store', '-id'], name='memver_store_id_desc'),
                ),
                migrations.AddIndex(
                    model_name='memoryversion',
                    index=models.Index(fields=['store', 'memory_id', '-id'], name='memver_store_memory'),
                ),
            ],
            database_operations=[],
        ),
    ]
