"""Cron schedules: a 5-field POSIX expression (minute hour day-of-month month day-of-week, 0 and
7 both Sunday) in an IANA time zone, as the SDK's BetaManagedAgentsScheduleParams documents;
seconds or year fields, L, W, #, ? and the @ shortcuts are refused.

Daylight saving time, where the SDK is silent, as cron (Vixie/ISC) does it: a time that a spring
change skips runs at the first instant after the change (02:30 on a day without 02:00-03:00 runs
at 03:00); a time that an autumn change repeats runs once, on its first pass, unless the hour
field is `*` (then every pass of the repeated hour runs, as its minutes come round)."""

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from core.errors import InvalidRequest

_FIELD = re.compile(r"^[0-9*,/\-]+$")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
UPCOMING = 5


def schedule_check(*, expression: str, timezone: str) -> None:
    """A 400 naming the field unless the expression and time zone are as documented."""
    fields = expression.split()
    if len(fields) != 5 or not all(_FIELD.match(field) for field in fields):
        raise InvalidRequest(
            "schedule.expression: a 5-field cron expression (minute hour day-of-month month day-of-week) of"
            " digits, *, ',', '-' and '/' only; seconds or year fields, L, W, #, ? and @ shortcuts are not"
            " supported."
        )
    for field, (low, high) in zip(fields, _RANGES, strict=True):
        for number in re.findall(r"\d+", field.split("/")[0]):
            if not low <= int(number) <= high:
                raise InvalidRequest(f"schedule.expression: {field!r} is out of range {low}-{high}.")
    if not croniter.is_valid(" ".join(fields)):
        raise InvalidRequest(f"schedule.expression: {expression[:100]!r} is not a valid cron expression.")
    zone(timezone)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidRequest(f"schedule.timezone: {name[:64]!r} is not an IANA time zone.") from exc


def _repeated_pass(moment: datetime) -> bool:
    """Whether `moment` is the second pass of a local time an autumn change repeats."""
    naive = moment.replace(tzinfo=None)
    first = naive.replace(tzinfo=moment.tzinfo, fold=0).utcoffset()
    second = naive.replace(tzinfo=moment.tzinfo, fold=1).utcoffset()
    return first != second and moment.utcoffset() == second


def occurrences_after(*, expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next `count` due times strictly after `after` (UTC datetimes)."""
    tz = zone(timezone)
    every_hour = expression.split()[1] == "*"
    it = croniter(expression, after.astimezone(tz))
    found: list[datetime] = []
    while len(found) < count:
        moment = it.get_next(datetime)
        if not every_hour and _repeated_pass(moment):
            continue
        found.append(moment.astimezone(ZoneInfo("UTC")))
    return found


def next_after(*, expression: str, timezone: str, after: datetime) -> datetime:
    return occurrences_after(expression=expression, timezone=timezone, after=after, count=1)[0]


def latest_due(*, expression: str, timezone: str, first_due: datetime, now: datetime) -> datetime:
    """The last due time in [first_due, now]: after an outage the missed times run once, as the
    latest of them (not once per missed time). `first_due` is the deployment's next_run_at."""
    tz = zone(timezone)
    every_hour = expression.split()[1] == "*"
    it = croniter(expression, (now + timedelta(seconds=1)).astimezone(tz))
    for _ in range(4):
        moment = it.get_prev(datetime)
        if moment > now or (not every_hour and _repeated_pass(moment)):
            continue
        return max(moment.astimezone(ZoneInfo("UTC")), first_due)
    return first_due
