import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_wsgi_application()

from core.serving import ReleaseDatabaseWhileWaiting  # noqa: E402 — after Django is set up

# A request gives its database connection back while it waits on the client (core/serving.py).
application = ReleaseDatabaseWhileWaiting(django_application)
