"""What every managed-agents view shares: the beta header rule and list-query readers."""

from django.conf import settings
from rest_framework.views import APIView

from core.api import require_beta_in_strict_mode
from core.errors import InvalidRequest


class AgentsApi(APIView):
    """Base: the managed-agents beta header is required only in strict mode (api-contract.md §0)."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        require_beta_in_strict_mode(request, settings.MANGO_AGENTS_BETA)


def query_order(request, default: str) -> str:
    order = request.query_params.get("order") or default
    if order not in ("asc", "desc"):
        raise InvalidRequest("order: must be asc or desc.")
    return order
