from django.core.management.base import BaseCommand, CommandError

from core.errors import ApiError
from sessions.queue.services import environment_key_create


class Command(BaseCommand):
    help = (
        "Create an environment key for a self_hosted environment: the credential of its workers "
        "(the SDK's EnvironmentWorker). The key is the last line printed, shown once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--environment", required=True, help="the environment id (env_…)")
        parser.add_argument("--name", default="", help="a label for the key")

    def handle(self, *args, environment, name, **options):
        try:
            key, raw_key = environment_key_create(environment_id=environment, name=name)
        except ApiError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"Environment: {key.environment.name} ({key.environment_id}), workspace {key.workspace_id}")
        self.stdout.write("Environment key (shown once; store it now):")
        self.stdout.write(raw_key)
