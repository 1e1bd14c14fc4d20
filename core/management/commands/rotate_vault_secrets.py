from django.core.management.base import BaseCommand

from core.secrets import secrets_reencrypt


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (vault credentials, repository tokens) under MANGO_VAULT_KEY's first"
        " key (after putting a new key first). Once it has run, the old key can be dropped from MANGO_VAULT_KEY."
    )

    def handle(self, *args, **options):
        count = secrets_reencrypt()
        self.stdout.write(f"Re-encrypted {count} secret(s) under the first key of MANGO_VAULT_KEY.")
