"""Adapters to the outside systems the worker reaches for tenants (git hosts now). A plain package:
no models, no app of ours imported; every outbound connection goes through core.outbound."""
