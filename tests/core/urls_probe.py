"""A test-only URLconf with views that fail on purpose, to check the error envelope."""

from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView

import config.urls


class Echo(APIView):
    def post(self, request):
        return Response({"received": request.data})


class Crash(APIView):
    def get(self, request):
        raise RuntimeError("boom: secret internals")


def plain_crash(request):
    raise RuntimeError("plain boom: secret internals")


urlpatterns = [
    path("probe/echo", Echo.as_view()),
    path("probe/crash", Crash.as_view()),
    path("probe/plain-crash", plain_crash),
    path("", include(config.urls.urlpatterns)),
]
handler400 = config.urls.handler400
handler403 = config.urls.handler403
handler404 = config.urls.handler404
handler500 = config.urls.handler500
