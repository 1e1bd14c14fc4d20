"""deployments.schedule: due times in an IANA zone across daylight-saving changes, as cron runs
them (docs/deployments.md), and the latest of missed times."""

from datetime import UTC, datetime

import pytest

from core.errors import InvalidRequest
from deployments.schedule import latest_due, occurrences_after, schedule_check

NEW_YORK = "America/New_York"


def test_a_time_the_spring_change_skips_runs_once_right_after_it():
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 that day runs at 03:00 EDT (07:00 UTC).
    times = occurrences_after(expression="30 2 * * *", timezone=NEW_YORK, after=datetime(2026, 3, 7, 12, tzinfo=UTC),
                              count=3)  # fmt: skip
    assert times == [datetime(2026, 3, 8, 7, 0, tzinfo=UTC), datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
                     datetime(2026, 3, 10, 6, 30, tzinfo=UTC)]  # fmt: skip


def test_a_time_the_autumn_change_repeats_runs_once_unless_the_hour_is_a_wildcard():
    # 2026-11-01: 01:00-02:00 happens twice (EDT, then EST).
    after = datetime(2026, 10, 31, 12, tzinfo=UTC)
    fixed = occurrences_after(expression="30 1 * * *", timezone=NEW_YORK, after=after, count=2)
    assert fixed == [datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 2, 6, 30, tzinfo=UTC)]
    before = datetime(2026, 11, 1, 4, 45, tzinfo=UTC)
    every = occurrences_after(expression="30 * * * *", timezone=NEW_YORK, after=before, count=3)
    # 01:30 EDT, 01:30 EST, 02:30 EST: both passes of the repeated hour.
    assert every == [datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
                     datetime(2026, 11, 1, 7, 30, tzinfo=UTC)]  # fmt: skip


def test_sunday_is_0_and_7_and_missed_times_run_as_the_latest():
    after = datetime(2026, 12, 4, 12, tzinfo=UTC)  # a Friday
    assert occurrences_after(expression="0 9 * * 0", timezone="UTC", after=after, count=1) == occurrences_after(
        expression="0 9 * * 7", timezone="UTC", after=after, count=1
    ) == [datetime(2026, 12, 6, 9, tzinfo=UTC)]  # fmt: skip
    now = datetime(2026, 12, 4, 21, 35, 12, tzinfo=UTC)
    first = datetime(2026, 12, 4, 20, 0, tzinfo=UTC)
    assert latest_due(expression="* * * * *", timezone="UTC", first_due=first, now=now) == datetime(
        2026, 12, 4, 21, 35, tzinfo=UTC
    )
    # Nothing later than the first missed time: that one.
    assert latest_due(expression="0 20 * * *", timezone="UTC", first_due=first, now=now) == first


@pytest.mark.parametrize(
    "expression", ["@hourly", "0 9 ? * *", "0 9 L * *", "0 9 * * 1#1", "0 0 9 * * *", "* 24 * * *"]
)
def test_extended_syntax_is_refused(expression):
    with pytest.raises(InvalidRequest, match=r"schedule\.expression"):
        schedule_check(expression=expression, timezone="UTC")
