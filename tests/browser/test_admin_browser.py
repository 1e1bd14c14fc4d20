"""The real admin in headless Chromium (Debian's `chromium`, driven by Playwright) against the
live test server: log in, the dashboard with real numbers, a workspace's files, revoking a key,
a session's transcript, live (a tool use and its result appear without reload), interrupted and
deleted from its page; styles load (every CSS request is 200). Screenshots go to
var/screenshots/ (one PNG per step)."""

import re
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client

from core.models import ApiKey
from core.services import api_key_create
from files.models import File
from sessions.services.events import session_event_append
from tests.factories import make_session
from tests.files.conftest import make_file

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
]  # fmt: skip

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is not installed (.ci/run installs it)"),
]


@pytest.fixture
def browser_page(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's ORM calls are sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(90_000)  # a loaded CI machine
        yield page
        browser.close()


def _seed(s3_bucket):
    acme_key, _ = api_key_create(workspace_name="acme")
    other_key, _ = api_key_create(workspace_name="globex")
    doomed, doomed_raw = api_key_create(workspace_name="acme", name="to revoke")
    acme = acme_key.workspace
    make_file(acme, b"a" * 150_000, filename="quarterly-report.pdf", mime_type="application/pdf")
    make_file(acme, b"b" * 2_500, filename="notes.md", mime_type="text/markdown")
    make_file(other_key.workspace, b"c" * 700, filename="globex-only.txt")
    session = make_session(acme, name="helper", title="browser")
    for n in range(25):
        session_event_append(session_id=session.id, type="agent.message", payload={"content": [{"text": f"step {n}"}]})
    error = {
        "type": "model_request_failed_error",
        "message": "upstream unreachable",
        "retry_status": {"type": "exhausted"},
    }
    session_event_append(session_id=session.id, type="session.error", payload={"error": error})
    User.objects.create_superuser("operator", "op@example.com", "operator-pw")
    return acme, session, doomed, doomed_raw


def test_operator_walkthrough(browser_page, live_server, s3_bucket):
    page = browser_page
    acme, session, doomed, doomed_raw = _seed(s3_bucket)
    css = []
    page.on("response", lambda r: css.append((r.url, r.status)) if r.url.endswith(".css") else None)

    # Log in.
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.screenshot(path=SCREENSHOTS / "01-login.png", full_page=True)
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#mango-dashboard")

    # The dashboard, with the numbers the database holds.
    assert page.inner_text("#files-total-count") == str(File.objects.filter(state="ready").count()) == "3"
    assert page.inner_text("#sessions-total") == "1"
    assert page.inner_text("#sessions-errors-hour") == "1"
    page.screenshot(path=SCREENSHOTS / "02-dashboard.png", full_page=True)
    storage = page.inner_text("#panel-files")
    assert re.search(r"acme\s+2\s+148\.9\s+KB", storage), storage
    assert re.search(r"globex\s+1\s+700\s+bytes", storage), storage

    # A workspace's files, from the dashboard.
    page.click("#panel-files >> text=acme")
    page.wait_for_selector("#result_list")
    listing = page.inner_text("#result_list").replace("\xa0", " ")
    assert "quarterly-report.pdf" in listing and "notes.md" in listing and "globex-only.txt" not in listing
    assert "146.5 KB" in listing
    page.screenshot(path=SCREENSHOTS / "03-workspace-files.png", full_page=True)

    # Revoke a key with the action.
    page.goto(f"{live_server.url}/admin/core/apikey/?workspace__id__exact={acme.id}")
    page.check(f"input[name=_selected_action][value={doomed.pk}]")
    page.select_option("select[name=action]", "revoke_keys")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    assert "Revoked 1 API key(s)." in page.inner_text("ul.messagelist")
    page.screenshot(path=SCREENSHOTS / "04-key-revoked.png", full_page=True)
    doomed.refresh_from_db()
    assert doomed.revoked_at is not None
    assert ApiKey.objects.filter(workspace=acme, revoked_at__isnull=True).count() == 1
    assert Client().get("/v1/files", headers={"authorization": f"Bearer {doomed_raw}"}).status_code == 401

    # A session as a transcript, from the dashboard's latest errors; live while it runs.
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/admin/")
    page.click(f"#panel-sessions >> text={session.id}")
    page.wait_for_selector("#session-transcript")
    transcript = page.inner_text("#transcript")
    assert "step 0" in transcript and "step 24" in transcript and "upstream unreachable" in transcript
    assert "Transcript (26 events)" in page.inner_text("#session-transcript")
    assert page.locator("input[name=_save]").count() == 0
    # The newest turn is in view: the transcript is scrolled to its end.
    assert page.evaluate("(() => { const b = document.getElementById('transcript'); "
                         "return b.scrollHeight - b.scrollTop - b.clientHeight < 40; })()")  # fmt: skip
    page.screenshot(path=SCREENSHOTS / "05-session.png", full_page=True)
    tool_use = {"id": "toolu_browser", "name": "bash", "input": {"command": "ls /workspace"}}
    appended = time.monotonic()
    session_event_append(session_id=session.id, type="agent.tool_use", payload=tool_use)
    result = {"tool_use_id": "toolu_browser", "content": [{"type": "text", "text": "notes.md\nreport.pdf"}]}
    session_event_append(session_id=session.id, type="agent.tool_result", payload=result)
    page.wait_for_selector("#transcript [data-type='agent.tool_result']", timeout=10_000)
    shown_after = time.monotonic() - appended
    assert shown_after < 2.0, f"the tool result showed {shown_after:.2f} s after it was appended"  # polled at 0.5 s
    live = page.inner_text("#transcript")
    assert "ls /workspace" in live and "report.pdf" in live and page.url.endswith("/change/")  # no reload
    # docs/screenshots/admin-session-transcript.png is a copy of this one.
    page.locator("#session-transcript").screenshot(path=SCREENSHOTS / "06-session-transcript.png")
    page.screenshot(path=SCREENSHOTS / "06-session-live.png", full_page=True)

    # Interrupt and delete from the page, through the API's services.
    page.click("#session-action-interrupt button")
    page.wait_for_selector("ul.messagelist")
    assert "Interrupt: done." in page.inner_text("ul.messagelist")
    assert session.events.filter(type="user.interrupt").count() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#session-action-delete button")
    page.wait_for_url(re.compile(r"/admin/agent_sessions/session/$"))
    assert f"Session {session.id} deleted." in page.inner_text("ul.messagelist")
    session.refresh_from_db()
    assert session.deleted_at is not None
    page.screenshot(path=SCREENSHOTS / "07-session-deleted.png", full_page=True)

    # Styles loaded: the admin's and ours, every one 200.
    urls = {url.split("/static/", 1)[-1] for url, _ in css}
    assert {"admin/css/base.css", "mango/admin.css"} <= urls, css
    first = {}
    for url, status in css:
        first.setdefault(url, status)
    assert set(first.values()) == {200}, first  # later loads may revalidate (304)
    # Queries made between Playwright calls use a connection of their own context: close it here,
    # or dropping the test database at the end of the run finds it still open.
    connections.close_all()
