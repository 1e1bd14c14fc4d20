"""What the vaults app tells others, without importing them."""

from django.dispatch import Signal

# Sent inside the transaction that archives or deletes a vault, or archives, revokes, deletes or
# re-keys one of its environment-variable credentials, with `workspace_id` and `vault_id`: what a
# running sandbox holds of the vault's secrets must go. Receivers defer their work to the commit
# (the sessions app removes those sandboxes' egress proxies: sessions/apps.py).
secrets_changed = Signal()
