import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_wsgi_application()

from config.bodies import GunicornBodies  # noqa: E402 — after Django is set up
from core.serving import ReleaseDatabaseWhileWaiting  # noqa: E402

# A request gives its database connection back while it waits on the client (core/serving.py);
# under gunicorn a body of known length is read straight from the socket (config/bodies.py).
application = GunicornBodies(ReleaseDatabaseWhileWaiting(django_application))
