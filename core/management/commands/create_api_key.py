from django.core.management.base import BaseCommand

from core.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a workspace (created if missing). The key is the last line printed."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True, help="workspace name")
        parser.add_argument("--name", default="", help="a label for the key")

    def handle(self, *args, workspace, name, **options):
        api_key, raw_key = api_key_create(workspace_name=workspace, name=name)
        self.stdout.write(f"Workspace: {api_key.workspace.name} ({api_key.workspace.id})")
        self.stdout.write("API key (shown once; store it now):")
        self.stdout.write(raw_key)
