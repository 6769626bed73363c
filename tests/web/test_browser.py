"""The dashboard in a real headless Chromium, against a real ``rota run --web``
node on a real SQLite file: what an operator sees and does, end to end."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from tests.cli.conftest import Cli, _task
from tests.web.conftest import Served, serve_node

HOURLY = 'every = "1h"\nstart = "2020-01-01T00:00:00+00:00"\nmisfire = "coalesce"\n'
SECONDLY = 'every = "1s"\n'


def job(job_id: str, command: str, when: str = HOURLY, extra: str = "") -> str:
    return f"[[jobs]]\nid = {json.dumps(job_id)}\n{when}command = {json.dumps(command)}\n{extra}"


def history(cli: Cli, job_id: str) -> list[Any]:
    done = cli("history", job_id, "--json")
    return json.loads(done.stdout) if done.returncode == 0 else []


@pytest.fixture
def node(cli: Cli) -> Iterator[Served]:
    cli.write(
        job("hourly", "echo hourly")
        + job("fails", "echo 'about to fail: <b>bold</b>'; exit 3")
        + job("often", "true", SECONDLY)
    )
    served = serve_node(cli)
    cli.wait(lambda: history(cli, "fails") != [] and history(cli, "hourly") != [], 30)
    yield served
    served.stop()


def test_the_jobs_page_lists_every_job_of_a_running_node(node: Served, page: Any) -> None:
    page.goto(node.url)
    for job_id in ("hourly", "fails", "often"):
        row = page.locator(f'tr[data-job="{job_id}"]')
        row.wait_for()
        assert job_id in row.inner_text()
    failed = page.locator('tr[data-job="fails"]').inner_text()
    assert "failed" in failed
    assert "exit status 3" in failed


def test_a_failing_jobs_error_and_output_show_on_its_page(node: Served, page: Any) -> None:
    page.goto(node.url)
    page.click('tr[data-job="fails"] td.id a')
    page.wait_for_url("**/jobs/fails")
    error = page.locator("pre.error").first
    assert "exit status 3" in error.inner_text()
    assert "about to fail: <b>bold</b>" in error.inner_text()  # text, not markup
    assert page.locator("pre.error b").count() == 0
    assert "every 1h" in page.locator("dd.schedule").inner_text()


def test_a_new_outcome_appears_on_an_open_page_within_two_seconds(
    node: Served, cli: Cli, page: Any
) -> None:
    page.goto(node.url + "jobs/hourly")
    before = page.locator("table.history tbody tr:not(.detail)").count()
    page.goto(node.url)
    page.locator('tr[data-job="hourly"]').wait_for()
    shown = page.locator('tr[data-job="hourly"] td.last').inner_text()
    assert cli("trigger", "hourly").returncode == 0
    cli.wait(lambda: len(history(cli, "hourly")) > 1, 20)
    recorded = time.time()
    page.wait_for_function(
        """([selector, old]) => document.querySelector(selector).innerText !== old""",
        arg=['tr[data-job="hourly"] td.last', shown], timeout=2_000,
    )  # fmt: skip
    assert time.time() - recorded < 2
    page.goto(node.url + "jobs/hourly")
    assert page.locator("table.history tbody tr:not(.detail)").count() == before + 1


def test_pause_from_the_page_reaches_the_node(node: Served, cli: Cli, page: Any) -> None:
    page.goto(node.url + "jobs/often")
    page.fill("#note", "deploying the database")
    page.click(".buttons button:has-text('Pause')")
    cli.wait(lambda: _task(cli, "often").get("paused") is True, 10)
    page.locator("#flash").filter(has_text="paused").wait_for()
    runs = len(history(cli, "often"))
    time.sleep(2.5)  # a run a second, were it not paused
    assert len(history(cli, "often")) <= runs + 1  # at most the run in flight then
    page.goto(node.url)
    row = page.locator('tr[data-job="often"]')
    assert "paused" in row.inner_text()
    assert "deploying the database" in row.inner_text()  # the note, for everyone
    status = cli("status").stdout
    assert "(paused)" in next(line for line in status.splitlines() if line.startswith("often"))
    log = node.log.read_text()
    assert "pause 'often' (note: deploying the database)" in log


class _OtherOrigin(http.server.BaseHTTPRequestHandler):
    """A page of another origin whose form posts to the dashboard."""

    target = ""

    def do_GET(self) -> None:
        body = (
            f'<form id="f" method="post" action="{self.target}"></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_with_a_token_controls_need_the_login_and_other_origins_change_nothing(
    cli: Cli, page: Any
) -> None:
    cli.write(job("guarded", "true"))
    node = serve_node(cli, "--token", "open-sesame-42")
    try:
        cli.wait(lambda: history(cli, "guarded") != [], 30)
        page.goto(node.url + "jobs/guarded")
        assert page.locator("section.controls").count() == 0
        assert page.locator(".buttons button").count() == 0
        # the API refuses the page's own fetch without the token
        status = page.evaluate(
            "async (u) => (await fetch(u, {method: 'POST'})).status",
            node.url + "api/jobs/guarded/pause",
        )
        assert status in (401, 403)
        assert _task(cli, "guarded")["paused"] is False
        page.click("text=Log in")
        page.fill("input[name=token]", "wrong")
        page.click("form.login button")
        assert "not the token" in page.inner_text("main")
        page.fill("input[name=token]", "open-sesame-42")
        page.click("form.login button")
        page.wait_for_url("**/jobs/guarded")
        # a page of another origin posts to the dashboard (the browser has the cookie)
        _OtherOrigin.target = node.url + "api/jobs/guarded/pause"
        other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtherOrigin)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            with page.context.new_page() as evil:
                evil.goto(f"http://localhost:{other.server_address[1]}/")
                evil.wait_for_load_state()
                time.sleep(0.5)
        finally:
            other.shutdown()
            other.server_close()
        assert _task(cli, "guarded")["paused"] is False
        assert "pause 'guarded' refused" in node.log.read_text()  # it did post
        page.click(".buttons button:has-text('Pause')")
        cli.wait(lambda: _task(cli, "guarded").get("paused") is True, 10)
        assert "open-sesame-42" not in node.stop()
    finally:
        if node.proc.poll() is None:
            node.stop()


def test_ids_and_output_are_shown_as_text_never_run(cli: Cli, page: Any) -> None:
    script = "<script>alert(1)</script>"
    image = '"><img src=x onerror=alert(2)>'
    cli.write(job(script, f"echo '{image}'") + job(f"x{image}", "true"))
    node = serve_node(cli)
    try:
        cli.wait(lambda: history(cli, script) != [], 30)
        page.goto(node.url)
        page.locator("td.id a").first.wait_for()
        ids = page.locator("td.id").all_inner_texts()
        assert script in ids
        assert f"x{image}" in ids
        page.goto(node.url + "jobs/" + quote(script, safe=""))
        assert page.locator("h1.job-id").inner_text() == script
        page.locator("pre.output").wait_for()
        assert image in page.locator("pre.output").inner_text()
        page.goto(node.url + "jobs/" + quote(f"x{image}", safe=""))
        page.wait_for_timeout(1500)  # a live refresh or two
        assert page.locator("img").count() == 0
        assert [d for d in page.dialogs if d[0] == "alert"] == []
    finally:
        node.stop()


def test_a_jobs_page_shows_its_calendar_and_what_it_does_to_the_next_runs(
    cli: Cli, page: Any
) -> None:
    today = datetime.now(UTC).date()
    holidays = json.dumps([str(today + timedelta(days=1)), str(today + timedelta(days=2))])
    noon = 'cron = "0 12 * * *"\ntz = "UTC"\n'
    cli.write(
        f"[calendars.c]\nweekends = []\ndates = {holidays}\n"
        + job("settle", "true", noon, 'calendar = "c"\non_excluded = "next"\n')
        + job("report", "true", noon, 'calendar = "c"\n')
    )
    served = serve_node(cli)
    try:
        page.goto(served.url + "jobs/settle")
        assert (
            "on calendar c (moved to the next allowed time)"
            in page.locator("dd.schedule").inner_text()
        )
        moved = page.locator(".upcoming span.moved").first.inner_text()
        assert f"moved from {(today + timedelta(days=1)):%a %Y-%m-%d} 12:00 (holiday)" in moved
        page.goto(served.url + "jobs/report")
        excluded = page.locator(".upcoming span.excluded").all_inner_texts()
        assert len(excluded) == 2
        assert all("excluded: holiday" in text for text in excluded)
    finally:
        served.stop()


def test_a_jobs_page_lists_its_upstream_and_downstream_and_what_a_run_waits_for(
    cli: Cli, page: Any
) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    cli.write(
        job("extract", "true", f'every = "1h"\nstart = "{later}"\n')
        + job("load", "true", HOURLY, 'after = "extract"\n')  # due now: it waits
    )
    served = serve_node(cli)
    try:
        page.goto(served.url + "jobs/load")
        page.locator("#job-waiting").wait_for()  # its first slot: no extract slot yet
        assert "waiting (extract)" in page.locator("#job-waiting").inner_text()
        assert page.locator(".deps").inner_text() == "After: extract"
        page.click(".deps a:has-text('extract')")
        page.locator("h1.job-id:has-text('extract')").wait_for()
        assert page.locator(".deps").inner_text() == "Before: load"
        assert page.locator("#job-waiting").count() == 0
    finally:
        served.stop()
