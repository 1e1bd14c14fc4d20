"""CI's sample of the crash campaign (bench/crash_campaign.py): at least 10 random kill points
across uploads, deletes, resource copies, expiry, output publication and reconciliation, each
followed by restart-time reconciliation and a full invariant check. The seed changes every day
(so CI covers other points over time) and is printed; MANGO_CRASH_CAMPAIGN_SEED reproduces a run."""

import os
import time

import pytest

from bench import crash_campaign

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.docker]


def test_seeded_crash_campaign_sample(s3_bucket, capsys):
    seed = int(os.environ.get("MANGO_CRASH_CAMPAIGN_SEED", int(time.time() // 86400)))
    points = int(os.environ.get("MANGO_CRASH_CAMPAIGN_POINTS", 10))
    lines = []
    result = crash_campaign.run(points=points, seed=seed, log=lines.append)
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert result.points == points >= 10
    assert result.child_errors == 0, lines
    # Most points are reached (a few Nth-hit points may lie past the end of a small operation).
    assert result.killed >= points // 2, lines
    assert {name: result.counts[name] for name in crash_campaign.COUNTS} == dict.fromkeys(crash_campaign.COUNTS, 0)


def test_seeded_crash_campaign_memory_write_back(s3_bucket, capsys):
    """Kills inside memory write-back (before and after a file's commit): no committed memory is
    lost, no half-written version is visible, and the resumed write-back converges on the tree."""
    seed = int(os.environ.get("MANGO_CRASH_CAMPAIGN_SEED", int(time.time() // 86400)))
    points = int(os.environ.get("MANGO_CRASH_CAMPAIGN_MEMORY_POINTS", 8))
    lines = []
    result = crash_campaign.run(points=points, seed=seed, log=lines.append, only="memory")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert result.points == points and result.by_operation == {"memory": points}
    assert result.child_errors == 0, lines
    assert result.killed >= points // 2, lines
    assert {name: result.counts[name] for name in crash_campaign.COUNTS} == dict.fromkeys(crash_campaign.COUNTS, 0)
