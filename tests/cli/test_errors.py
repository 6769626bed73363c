"""A run's error reads the same for people everywhere: ``history`` (text and JSON),
``check`` (text and JSON), the API and every page that shows it.

Before, they showed rota's private class paths (``rota.cli._command.CommandError:
exit status 3 (no output)``) and an empty ``output:`` block after them.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

from rota import DurableScheduler
from rota.store import SQLiteStore
from tests.cli.conftest import Cli

JOBS = """
[[jobs]]
id = "quiet"
every = "0.3s"
command = "exit 3"

[[jobs]]
id = "bad-json"
every = "0.3s"
call = "json:loads"
args = ["{"]
"""
SHOWN = {
    "quiet": "exit status 3 (no output)",
    "bad-json": "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes",
}


def _everything_shown(cli: Cli, path: Path) -> dict[str, str]:
    """Every place a person reads the jobs' latest errors, by where."""
    from starlette.testclient import TestClient

    import rota.web

    texts = {"check": cli("check").stdout}
    for job in SHOWN:
        texts[f"history {job}"] = cli("history", job).stdout
        texts[f"history --json {job}"] = cli.json("history", job)[0]["error"]
    problems = json.loads(cli("check", "--json").stdout)
    texts["check --json"] = " ".join(problem["detail"] for problem in problems)
    store = SQLiteStore(path)
    try:
        client = TestClient(rota.web.asgi_app(DurableScheduler(store)))
        for route in ["/", "/failures", "/jobs/quiet", "/jobs/bad-json",
                      "/api/jobs/quiet/history", "/api/jobs/bad-json/history"]:  # fmt: skip
            answer = client.get(route)
            assert answer.status_code == 200, route
            texts[route] = answer.text
    finally:
        store.close()
    return texts


def test_a_runs_error_is_shown_without_private_paths_or_an_empty_output(cli: Cli) -> None:
    cli.write(JOBS)
    proc = cli.start()
    cli.wait(lambda: all(cli.loaded() and cli.json("history", job) for job in SHOWN))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    path = cli.dir / "state.db"
    for where, text in _everything_shown(cli, path).items():
        assert "rota." not in text, (where, text)
        assert "output:" not in text, (where, text)
        assert "_command" not in text, (where, text)
    shown = _everything_shown(cli, path)
    for job, error in SHOWN.items():
        assert error in shown[f"history {job}"]
        assert shown[f"history --json {job}"].startswith(error)
        assert error in shown["check"]
        assert error in shown["check --json"]


def test_errors_recorded_before_read_the_same(cli: Cli) -> None:
    """A row written before (its text as ``traceback`` formatted it) is shown as a new
    one is: the rendering is one function, at record time and at display time."""
    cli.write('[[jobs]]\nid = "quiet"\nevery = "1h"\ncommand = "exit 3"\n')
    proc = cli.start()
    cli.wait(cli.loaded)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    db = sqlite3.connect(cli.dir / "state.db")
    with db:
        db.execute(
            "INSERT INTO rota_outcomes (task_id, slot, attempt, fence, at, result, error, "
            "started, finished) VALUES ('quiet', 1, 0, 0, 1, 'failed', ?, 1, 2)",
            ("rota.cli._command.CommandError: exit status 3 (no output)\noutput:\n",),
        )
    db.close()
    [entry] = cli.json("history", "quiet")
    assert entry["error"] == "exit status 3 (no output)"
    assert "    exit status 3 (no output)\n" in cli("history", "quiet").stdout
    assert "output:" not in cli("history", "quiet").stdout
