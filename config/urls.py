from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from core import metrics as core_metrics
from core import views as core_views

urlpatterns = [
    path("healthz", core_views.healthz),
    path("readyz", core_views.readyz),
    path("metrics", core_metrics.metrics_view),
    path("admin/", admin.site.urls),
    path("openapi.json", SpectacularJSONAPIView.as_view(authentication_classes=[], permission_classes=[])),
    path("v1/", include("files.urls")),
    path("v1/", include("agents.urls")),
    path("v1/", include("vaults.urls")),
    path("v1/", include("memory.urls")),
    path("v1/", include("skills.urls")),
    path("v1/", include("sessions.urls")),
    path("v1/", include("webhooks.urls")),
    path("v1/", include("deployments.urls")),
    path("v1/", include("dreams.urls")),
]

handler400 = core_views.handler400
handler403 = core_views.handler403
handler404 = core_views.handler404
handler500 = core_views.handler500
