"""The base of every API view (api-contract.md §0): the beta-header rule, and the list order."""

from django.conf import settings
from rest_framework.views import APIView

from core.api import require_beta
from core.errors import InvalidRequest


class BetaApi(APIView):
    """Base of every API view: the betas (names of settings) a strict-mode request must name one
    of; the managed-agents beta unless a view says otherwise."""

    betas: tuple[str, ...] = ("MANGO_AGENTS_BETA",)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        require_beta(request.META, *(getattr(settings, name) for name in self.betas))


def query_order(request, default: str) -> str:
    order = request.query_params.get("order") or default
    if order not in ("asc", "desc"):
        raise InvalidRequest("order: must be asc or desc.")
    return order
