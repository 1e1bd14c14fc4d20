from django.core.management.base import BaseCommand, CommandError

from core.errors import InvalidRequest
from webhooks.services import endpoint_create_for_workspace_name


class Command(BaseCommand):
    help = (
        "Create a webhook endpoint for a workspace (created if missing). The signing secret is the last line printed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True, help="workspace name")
        parser.add_argument("--url", required=True, help="the receiver's URL")
        parser.add_argument("--events", nargs="*", default=[], metavar="TYPE", help="event types (default: all)")

    def handle(self, *args, workspace, url, events, **options):
        try:
            endpoint, secret = endpoint_create_for_workspace_name(workspace_name=workspace, url=url, event_types=events)
        except InvalidRequest as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Webhook endpoint {endpoint.id} for workspace {endpoint.workspace.name}: {endpoint.url}")
        self.stdout.write("Signing secret (shown once; store it now):")
        self.stdout.write(secret)
