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


def test_every_sdk_option_has_a_status():
    # A new SDK option that Mango's input schema does not declare and no rule of
    # tests/sdk_options.py names would be accepted and ignored: say what Mango does with it.
    rows = sdk_surface.option_rows()
    assert len(rows) > 600, "the probe reads the SDK's nested parameter types"
    missing = [f"{option.where} {option.path} ({', '.join(option.methods)})" for option, verdict in rows if not verdict]
    assert not missing, "SDK options with no status in tests/sdk_options.py:\n" + "\n".join(missing)
    paths = {(option.where, option.path): verdict for option, verdict in rows}
    assert paths[("body", "tools[]<agent_toolset_20260401>.configs[]<bash>.permission_policy<auto>")][0] == "served"
    assert paths[("body", "execution_identity<aws_role>")][0] == "refused"
    assert paths[("query", "lifecycle")][0] == "served"
    assert paths[("header", "workspace_id")][0] == "served"


def test_every_rule_names_an_option_of_the_sdk():
    # A rule that matches nothing is stale (the SDK renamed or dropped the option).
    from fnmatch import fnmatchcase

    from tests import sdk_options

    rows = sdk_surface.option_rows()
    stale = [
        pattern
        for where, pattern, _, _ in sdk_options.RULES
        if not any(option.where == where and fnmatchcase(option.path, pattern) for option, _ in rows)
    ]
    assert not stale, f"rules in tests/sdk_options.py that match no SDK option: {stale}"
