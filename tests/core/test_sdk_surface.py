"""docs/sdk.md against the SDK and the code: every method of `client.beta` in scope with the
request the SDK sends and whether a view answers it, every session event type and whether Mango
writes it (tests/sdk_surface.py reads both off the SDK), and a reason for each gap."""

from tests import sdk_surface


def test_the_page_is_what_the_sdk_and_the_routes_say():
    assert sdk_surface.PAGE.read_text() == sdk_surface.page(), (
        "docs/sdk.md is stale: run `python -m tests.sdk_surface --write` and write a note for each new gap"
    )


def test_every_gap_says_why():
    notes = sdk_surface._notes()
    gaps = [name for name, _, status in sdk_surface.rows() if status in ("absent", "not written")]
    assert not [name for name in gaps if not notes.get(name)], "a gap without a note in docs/sdk.md"


def test_the_probe_reads_real_requests():
    methods = sdk_surface.sdk_methods()
    assert methods["beta.agents.create"] == ("POST", "/v1/agents")
    assert methods["beta.sessions.events.send"] == ("POST", "/v1/sessions/session_id_probe/events")
    assert sdk_surface.route_serves("POST", "/v1/agents") and not sdk_surface.route_serves("PUT", "/v1/agents")
    assert "session.status_idle" in sdk_surface.sdk_event_types()
