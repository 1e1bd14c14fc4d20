from django.contrib import admin

from core import dashboard


class MangoAdminSite(admin.AdminSite):
    site_header = "Mango operations"
    site_title = "Mango admin"
    index_title = "Operator dashboard"
    # The API has no page at "/": no "View site" link to a 404.
    site_url = None

    def index(self, request, extra_context=None):
        return super().index(request, {**(extra_context or {}), "panels": dashboard.render_panels()})
