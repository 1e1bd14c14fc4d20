# Each store counts what its version log holds (memory/services.py VERSION_OVERHEAD_BYTES = 256):
# the stores written before this migration are counted from their versions.

from django.db import migrations, models

_COUNT = """
UPDATE agent_sessions_memorystore AS store SET stored_bytes = COALESCE((
    SELECT SUM(COALESCE(version.content_size_bytes, 0) + COALESCE(octet_length(version.path), 0) + 256)
    FROM agent_sessions_memoryversion AS version WHERE version.store_id = store.id
), 0)
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='memorystore',
            name='stored_bytes',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.RunSQL(_COUNT, reverse_sql=migrations.RunSQL.noop),
    ]
