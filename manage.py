#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:
        # One line naming what failed and what to check, not a traceback.
        from django.conf import settings

        db = settings.DATABASES["default"]
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        sys.exit(
            f"[mango] PostgreSQL {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db.get('NAME')}: "
            f"{reason}. Check DATABASE_URL (or the .env that `make run` writes)."
        )


if __name__ == "__main__":
    main()
