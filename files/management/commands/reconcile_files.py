from django.core.management.base import BaseCommand

from files import reconcile, storage


class Command(BaseCommand):
    help = (
        "Finish interrupted Files uploads and deletes: at once when the process that owned them is "
        "dead, never while it lives (safe to run while the API is serving); intents without an owner "
        "are finished once idle for longer than MANGO_RECONCILE_GRACE_SECONDS."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Only print what would be done.")
        parser.add_argument(
            "--grace-seconds",
            type=int,
            default=None,
            help="Override MANGO_RECONCILE_GRACE_SECONDS for ownerless intents (0 only when no upload can be live).",
        )
        parser.add_argument(
            "--scan-orphans",
            action="store_true",
            help=(
                "Also list the bucket and delete objects that no File, no owned object (skill files, ...) "
                "and no open intent names."
            ),
        )

    def handle(self, *args, dry_run=False, grace_seconds=None, scan_orphans=False, **options):
        if not storage.is_configured():
            self.stdout.write("Files storage is not configured (MANGO_FILE_S3_BUCKET): nothing to reconcile.")
            return
        report = reconcile.reconcile(grace_seconds=grace_seconds, dry_run=dry_run, scan_orphans=scan_orphans)
        for action in report.actions:
            self.stdout.write(("would " if dry_run else "") + action)
        summary = ", ".join(f"{key}={value}" for key, value in report.as_dict().items())
        self.stdout.write(f"reconcile_files: {summary}")
