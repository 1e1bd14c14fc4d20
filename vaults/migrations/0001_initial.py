# The vaults models moved here from the sessions app (label agent_sessions): their tables stay where
# they are (Meta.db_table), so this migration changes only Django's state: `sqlmigrate vaults 0001`
# prints no DDL. agent_sessions 0012 removes them from that app's state and moves their content types.

import core.models
import django.db.models.deletion
import vaults.models
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
                    name='Vault',
                    fields=[
                        ('id', models.CharField(default=vaults.models._vault_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('display_name', models.CharField(max_length=255)),
                        ('metadata', models.JSONField(default=dict)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('archived_at', models.DateTimeField(blank=True, null=True)),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='vaults', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_vault',
                    },
                    bases=(core.models.Archivable, models.Model),
                ),
                migrations.CreateModel(
                    name='VaultCredential',
                    fields=[
                        ('id', models.CharField(default=vaults.models._credential_id, editable=False, max_length=64, primary_key=True, serialize=False)),
                        ('display_name', models.CharField(blank=True, max_length=255, null=True)),
                        ('metadata', models.JSONField(default=dict)),
                        ('auth_type', models.CharField(choices=[('static_bearer', 'Static Bearer'), ('mcp_oauth', 'Mcp Oauth'), ('environment_variable', 'Environment Variable')], max_length=32)),
                        ('mcp_server_url', models.CharField(max_length=2048)),
                        ('auth', models.JSONField(default=dict)),
                        ('secret', models.TextField()),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('archived_at', models.DateTimeField(blank=True, null=True)),
                        ('vault', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='credentials', to='vaults.vault')),
                        ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='vault_credentials', to='core.workspace')),
                    ],
                    options={
                        'db_table': 'agent_sessions_vaultcredential',
                    },
                    bases=(core.models.Archivable, models.Model),
                ),
                migrations.AddIndex(
                    model_name='vault',
                    index=models.Index(fields=['workspace', '-id'], name='vault_ws_id_desc'),
                ),
                migrations.AddIndex(
                    model_name='vaultcredential',
                    index=models.Index(fields=['vault', '-id'], name='vault_credential_id_desc'),
                ),
                migrations.AddConstraint(
                    model_name='vaultcredential',
                    constraint=models.UniqueConstraint(condition=models.Q(('archived_at__isnull', True), models.Q(('auth_type', 'environment_variable'), _negated=True)), fields=('vault', 'mcp_server_url'), name='vault_credential_live_url_unique'),
                ),
            ],
            database_operations=[],
        ),
    ]
