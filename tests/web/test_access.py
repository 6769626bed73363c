"""Scoped tokens, the audit log and tags on the dashboard and the API, against a real
``rota run --web`` node on a real SQLite file, and the audit page in a real Chromium."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import Cli, _task
from tests.web.conftest import Served, serve_node

TOKENS = {"OPS_TOKEN": "ops-secret-1", "VIEW_TOKEN": "view-secret-2"}
ADMIN = "admin-secret-3"


def _call(url: str, token: str | None = None, method: str = "GET", body: Any = None) -> Any:
    """``(status, JSON)`` of one request."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def node(cli: Cli) -> Iterator[Served]:
    cli.env.update(TOKENS)
    digest = hashlib.sha256(ADMIN.encode()).hexdigest()
    cli.write(
        "[access]\n"
        'ops = { scope = "operate", token = { env = "OPS_TOKEN" } }\n'
        'viewer = { scope = "read", token = { env = "VIEW_TOKEN" } }\n'
        f'boss = {{ scope = "admin", sha256 = "{digest}" }}\n'
        '[[jobs]]\nid = "load"\nevery = "1h"\ncommand = "true"\ntags = ["etl", "finance"]\n'
        '[[jobs]]\nid = "report"\nevery = "1h"\ncommand = "true"\ntags = ["etl"]\n'
        '[[jobs]]\nid = "misc"\nevery = "1h"\ncommand = "true"\n'
    )
    served = serve_node(cli)
    cli.wait(lambda: cli.loaded() and len(cli.json("status")) == 3)
    yield served
    log = served.stop()
    for secret in (*TOKENS.values(), ADMIN):
        assert secret not in log


def test_each_scope_may_do_what_it_grants_and_gets_403_beyond(node: Served, cli: Cli) -> None:
    pause = node.url + "api/jobs/load/pause"
    assert _call(pause, TOKENS["VIEW_TOKEN"], "POST", {"note": "try"})[0] == 403
    assert _task(cli, "load")["paused"] is False  # changed nothing
    assert _call(pause, "not-a-token", "POST")[0] == 401
    assert _call(pause, None, "POST")[0] == 401  # tokens are set: a control needs one
    status, body = _call(pause, TOKENS["OPS_TOKEN"], "POST", {"note": "upgrade"})
    assert (status, body["paused"]) == (200, True)
    assert _call(node.url + "api/jobs/load/resume", ADMIN, "POST")[0] == 200
    # reads: any token's, or none (loopback, as without tokens); an unknown token: 401
    assert _call(node.url + "api/jobs", TOKENS["VIEW_TOKEN"])[0] == 200
    assert _call(node.url + "api/jobs")[0] == 200
    assert _call(node.url + "api/audit", "nope")[0] == 401
    status, audit = _call(node.url + "api/audit?job=load", TOKENS["VIEW_TOKEN"])
    assert status == 200
    assert [(a["who"], a["action"], a["applied"], a["note"]) for a in audit] == [
        ("boss", "resume", True, None),
        ("ops", "pause", True, "upgrade"),
        ("viewer", "pause", False, "the token 'viewer' has scope 'read'; this needs 'operate'"),
    ]  # fmt: skip
    assert cli.json("audit", "--job", "load") == audit  # the command reads the same log
    assert _call(node.url + "api/audit?limit=0")[0] == 400


def test_jobs_are_listed_by_tag(node: Served) -> None:
    _, etl = _call(node.url + "api/jobs?tag=etl")
    assert [j["id"] for j in etl] == ["load", "report"]
    _, finance = _call(node.url + "api/jobs?tag=finance")
    assert [(j["id"], j["tags"]) for j in finance] == [("load", ["etl", "finance"])]
    assert _call(node.url + "api/jobs?tag=none")[1] == []


def test_the_audit_page_and_the_tag_filter_in_a_browser(node: Served, cli: Cli, page: Any) -> None:
    page.goto(node.url)
    page.select_option("select[name=tag]", "finance")
    page.click("form.filters button")
    page.wait_for_url("**tag=finance**")
    page.locator('tr[data-job="load"]').wait_for()
    assert page.locator('tr[data-job="report"]').count() == 0
    page.goto(node.url + "jobs/load")
    assert page.inner_text("dd.tags") == "etl, finance"
    page.click("dd.tags a:has-text('etl')")
    page.wait_for_url("**tag=etl**")
    page.locator('tr[data-job="report"]').wait_for()
    assert page.locator('tr[data-job="misc"]').count() == 0
    page.click("text=Log in")
    page.fill("input[name=token]", TOKENS["OPS_TOKEN"])
    page.click("form.login button")
    page.goto(node.url + "jobs/report")
    page.fill("#note", "quarter close")
    page.click(".buttons button:has-text('Pause')")
    cli.wait(lambda: _task(cli, "report").get("paused") is True, 10)
    page.goto(node.url + "audit")
    row = page.locator("table.audit tbody tr").first
    row.wait_for()
    text = row.inner_text()
    assert "ops" in text
    assert "pause" in text
    assert "report" in text
    assert "quarter close" in text
    page.goto(node.url)  # the pause note, from the log, for everyone
    assert "quarter close" in page.locator('tr[data-job="report"]').inner_text()


def test_backfill_through_the_api_needs_admin(node: Served, cli: Cli) -> None:
    url = node.url + "api/jobs/load/backfill"
    window = {"from": "2026-01-01T00:00:00+00:00", "until": "2026-01-01T03:00:00+00:00"}
    assert _call(url, TOKENS["OPS_TOKEN"], "POST", window)[0] == 403
    assert _call(url, ADMIN, "POST", {"until": 5})[0] == 400
    status, body = _call(url, ADMIN, "POST", {**window, "note": "the January gap"})
    assert (status, body) == (200, {"id": "load", "queued": 3})
    assert _call(node.url + "api/jobs/nope/backfill", ADMIN, "POST", window)[0] == 404
    actions = [(a["who"], a["action"], a["applied"]) for a in cli.json("audit", "--job", "load")]
    assert actions == [("boss", "backfill", True), ("ops", "backfill", False)]


def test_rota_web_takes_named_tokens_from_rota_tokens_file(cli: Cli, tmp_path: Any) -> None:
    from tests.web.conftest import serve_web

    cli.write('[[jobs]]\nid = "j"\nevery = "1h"\ncommand = "true"\n')
    node = serve_node(cli)
    cli.wait(cli.loaded)
    node.stop()
    tokens = tmp_path / "tokens.toml"
    digest = hashlib.sha256(b"reader-only").hexdigest()
    tokens.write_text(f'[access]\nreader = {{ scope = "read", sha256 = "{digest}" }}\n')
    cli.env["ROTA_TOKENS_FILE"] = str(tokens)
    web = serve_web(cli)
    try:
        assert _call(web.url + "api/jobs/j/pause", "reader-only", "POST")[0] == 403
        assert _call(web.url + "api/jobs", "reader-only")[0] == 200
        assert _call(web.url + "api/jobs/j/pause", None, "POST")[0] == 401
    finally:
        web.stop()
