"""The dashboard as the trial saw it at scale, in a real Chromium against a real node:
what read as unfinished (issue 42). A node with 250 jobs: a summary line, "100 of
250", numbered pages, sortable columns, ids never broken, relative times with the
absolute one on hover, the store as a redacted URL, a favicon, failures grouped by
job, buttons that apply and only those, a chart with a seconds axis."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import Cli
from tests.web.conftest import Served, serve_node
from tests.web.test_browser import SECONDLY, history, job

IDS = [f"job-{i:03}" for i in range(247)]
LONG = "a-rather-long-job-id-that-must-never-be-broken-in-the-middle-of-a-word"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Served]]:
    cli = Cli(tmp_path_factory.mktemp("fleet"))
    cli.write(
        "".join(job(i, "true") for i in IDS)
        + job(LONG, "true")
        + job("flaky", "echo down; exit 3", SECONDLY)
        + job("chart", "true", SECONDLY)
    )
    served = serve_node(cli)
    try:
        cli.wait(lambda: len(history(cli, "flaky")) >= 3 and len(history(cli, "chart")) >= 3, 60)
        assert cli("pause", "job-001").returncode == 0
        assert cli("cancel", "job-002").returncode == 0
        yield cli, served
    finally:
        served.stop()
        cli.kill_all()


def test_the_jobs_page_heads_with_a_summary_and_pages_by_number(
    fleet: tuple[Cli, Served], page: Any
) -> None:
    _, node = fleet
    page.goto(node.url)
    summary = page.locator("p.summary").inner_text()
    assert re.search(r"250 jobs · 1 failing · 1 paused · 0 overdue · \d+ running", summary)
    assert page.locator("p.count").inner_text() == "100 of 250 jobs, page 1 of 3"
    assert page.locator("nav.pages").inner_text().split() == ["1", "2", "3"]
    page.click("nav.pages a:has-text('3')")
    page.wait_for_url("**page=3")
    assert page.locator("p.count").inner_text() == "50 of 250 jobs, page 3 of 3"
    assert page.locator("tbody tr").count() == 50


def test_columns_sort_both_ways(fleet: tuple[Cli, Served], page: Any) -> None:
    _, node = fleet
    page.goto(node.url)
    assert page.locator("tbody tr").first.get_attribute("data-job") == LONG
    page.click("th a.sort:has-text('Job')")  # ascending already: now descending
    page.wait_for_url("**desc=1**")
    assert page.locator("tbody tr").first.get_attribute("data-job") == "job-246"
    page.click("th a.sort:has-text('Last run')")
    page.wait_for_url("**sort=last**")
    assert page.locator("tbody tr").first.get_attribute("data-job") == "flaky"


def test_ids_and_times_never_break_and_times_read_relative(
    fleet: tuple[Cli, Served], page: Any
) -> None:
    _, node = fleet
    page.set_viewport_size({"width": 900, "height": 700})
    page.goto(node.url)
    cell = page.locator(f'tr[data-job="{LONG}"] td.id')
    line = float(cell.evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 20"))
    assert cell.bounding_box()["height"] < 2 * line + 8  # one line (and the padding)
    shown = page.locator('tr[data-job="chart"] td.next time')
    assert re.fullmatch(r"now|in \d+ (s|min)", shown.inner_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+[+-]\d\d:\d\d", shown.get_attribute("title"))
    last = page.locator('tr[data-job="chart"] td.last time').inner_text()
    assert re.fullmatch(r"(now|\d+ (s|min) ago)", last)


def test_the_store_is_named_by_its_url_and_the_favicon_is_served(
    fleet: tuple[Cli, Served], page: Any
) -> None:
    cli, node = fleet
    page.goto(node.url)
    header = page.locator("header .store").inner_text()
    assert header == f"sqlite:///{cli.dir / 'state.db'}"
    assert "SQLiteStore(" not in page.title()
    assert "sqlite:///" in page.title()
    with urllib.request.urlopen(node.url + "favicon.ico", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("image/svg+xml")


def test_only_the_buttons_that_apply_are_shown(fleet: tuple[Cli, Served], page: Any) -> None:
    _, node = fleet
    page.goto(node.url + "jobs/job-001")  # paused
    buttons = page.locator(".buttons button")
    buttons.first.wait_for()
    assert buttons.all_inner_texts() == ["Resume", "Run now", "Cancel"]
    page.goto(node.url + "jobs/job-002")  # cancelled
    page.locator("#job-status").wait_for()
    assert page.locator(".buttons button").count() == 0
    page.goto(node.url + "jobs/job-003")
    page.locator(".buttons button").first.wait_for()
    assert page.locator(".buttons button").all_inner_texts() == ["Pause", "Run now", "Cancel"]
    page.goto(node.url + "?q=job-002")
    assert page.locator('tr[data-job="job-002"] td.actions button').count() == 0


def test_failures_are_grouped_by_job_with_a_count(fleet: tuple[Cli, Served], page: Any) -> None:
    _, node = fleet
    page.goto(node.url + "failures")
    rows = page.locator("table.failures tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1  # one row for the job, however many of its runs failed
    counted = rows.first.locator("td.count").inner_text()
    failed, runs = map(int, counted.split(" of "))
    assert failed == runs >= 3


def test_the_chart_has_a_seconds_axis(fleet: tuple[Cli, Served], page: Any) -> None:
    _, node = fleet
    page.goto(node.url + "jobs/chart")
    chart = page.locator("figure.chart svg")
    chart.wait_for()
    texts = chart.locator("text").all_text_contents()
    assert "seconds" in texts
    assert "0" in texts
    assert {"oldest", "newest run"} <= set(texts)


def test_the_nodes_page_lists_every_node_with_its_heartbeat(
    fleet: tuple[Cli, Served], page: Any
) -> None:
    """It said "No node holds a run now" while an idle node ran: nodes are listed by
    their heartbeats, idle or not, and one that stopped beating is marked dead."""
    cli, node = fleet
    from rota import DurableScheduler
    from rota.store import SQLiteStore

    store = SQLiteStore(cli.dir / "state.db")
    try:  # a node that beat once, long ago (its lease long past): dead
        DurableScheduler(store)
        store.beat("gone-host:1:dead", 1_000_000_000, 30)
    finally:
        store.close()
    page.goto(node.url + "nodes")
    sections = page.locator("section.node")
    sections.first.wait_for()
    live = page.locator("section.node:not(.dead)")
    assert live.count() == 1
    assert "live" in live.first.locator("h2").inner_text()
    assert re.search(r"Last heartbeat (now|\d+ s ago)", live.first.inner_text())
    dead = page.locator("section.node.dead")
    assert dead.count() == 1
    assert "gone-host:1:dead" in dead.first.inner_text()
    assert "no heartbeat for longer than its lease" in dead.first.inner_text()
    assert page.locator("p.count").first.inner_text() == "1 live of 2 nodes"


def test_the_flash_message_stands_clear_of_the_header(
    fleet: tuple[Cli, Served], page: Any
) -> None:
    _, node = fleet
    page.goto(node.url + "jobs/job-004")
    page.click(".buttons button:has-text('Run now')")
    flash = page.locator("#flash")
    flash.filter(has_text="trigger").wait_for()
    header = page.locator("header").bounding_box()
    text = flash.evaluate(
        "e => { const r = document.createRange(); r.selectNodeContents(e);"
        " return r.getBoundingClientRect().top; }"
    )
    assert text - (header["y"] + header["height"]) >= 6  # it sat against the header
