"""The base of every API view (api-contract.md §0): the beta-header rule, and the list order."""

from django.conf import settings
from rest_framework.views import APIView

from core.api import require_beta
from core.errors import InvalidRequest


class BetaApi(APIView):
    # Base of every API view. `betas`: the names of the settings holding the betas a strict-mode
    # request must name one of (api-contract.md §0). No docstring: a view without one of its own
    # would show this class's in /openapi.json.
    betas: tuple[str, ...] = ("MANGO_AGENTS_BETA",)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        require_beta(request.META, *(getattr(settings, name) for name in self.betas))


class AgentsApi(BetaApi):
    """Base: the managed-agents beta header is required only in strict mode (api-contract.md §0)."""


def query_order(request, default: str) -> str:
    order = request.query_params.get("order") or default
    if order not in ("asc", "desc"):
        raise InvalidRequest("order: must be asc or desc.")
    return order
