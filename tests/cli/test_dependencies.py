"""``after`` in job files, through the command: ``rota plan`` names each job's upstream,
``rota status`` shows a waiting run and what it waits for, a cycle exits 2 naming the
file, the job and the key, and ``rota run`` runs a job after its upstream's slot."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime

from rota import FixedRate, ManualClock
from rota.durable import DurableScheduler
from rota.store import SQLiteStore
from tests.cli.conftest import Cli

JOBS = """
[[jobs]]
id = "import"
cron = "0 * * * *"
tz = "UTC"
command = "true"

[[jobs]]
id = "report"
cron = "0 6 * * *"
tz = "UTC"
after = [{ job = "import", within = "window" }]
deadline = "2h"
command = "true"
"""


def plan(cli: Cli, *args: str) -> subprocess.CompletedProcess[str]:
    """``rota plan`` of the job file (it reads no store)."""
    return subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(cli.jobs), *args],
        cwd=cli.dir, env=cli.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_plan_names_each_jobs_upstream(cli: Cli) -> None:
    cli.write(JOBS)
    window = ("--from", "2026-12-04T05:30:00+00:00", "--until", "2026-12-04T06:00:00+00:00")
    done = plan(cli, *window)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("2026-12-04T06:00:00+00:00  report")
    assert lines[at + 1] == "  after import (window)"
    planned = json.loads(plan(cli, *window, "--json").stdout)
    assert [p["after"] for p in planned if p["job"] == "report"] == [[["import", "window"]]]


def test_a_cycle_in_a_file_exits_2_naming_the_file_the_job_and_the_key(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "a"\nevery = "1h"\nafter = ["b"]\ncommand = "true"\n'
              '[[jobs]]\nid = "b"\nevery = "1h"\nafter = "a"\ncommand = "true"\n')  # fmt: skip
    done = plan(cli)
    assert done.returncode == 2
    assert f"{cli.jobs}: job 'a': key 'after': after would make a cycle: 'a' -> 'b' -> 'a'" in (
        done.stderr
    )


def test_status_shows_a_waiting_run_and_what_it_waits_for(cli: Cli) -> None:
    """A store where ``load`` waits for ``extract@05:00`` (extract paused): ``status``
    says so, in the job's zone; ``--json`` keeps the scheduled status and the key."""
    five = datetime(2026, 12, 4, 5, tzinfo=UTC).timestamp()
    clock = ManualClock(five - 60)
    store = SQLiteStore(str(cli.dir / "state.db"))
    sched = DurableScheduler(store, clock=clock)
    sched.schedule("extract", FixedRate(3600, start=five), "rota.cli._command:run_command",
                   kwargs={"command": "true", "timeout": None})  # fmt: skip
    sched.schedule("load", FixedRate(3600, start=five), "rota.cli._command:run_command",
                   kwargs={"command": "true", "timeout": None}, after="extract")  # fmt: skip
    sched.pause("extract")
    clock.advance(60)
    sched.tick(five)
    store.close()
    [load] = [e for e in cli.json("status") if e["id"] == "load"]
    assert load["status"] == "scheduled"
    assert load["waiting_for"] == [f"extract@{five!r}"]
    assert load["next"] == five
    text = cli("status", "--tz", "UTC").stdout
    assert "waiting (extract@2026-12-04 05:00)" in text


def test_run_runs_a_job_after_its_upstreams_slot(cli: Cli) -> None:
    cli.write(
        '[[jobs]]\nid = "load"\nevery = "0.4s"\nafter = "extract"\n'
        'command = ["sh", "-c", "echo load $ROTA_SLOT >> $OUT"]\n'
        '[[jobs]]\nid = "extract"\nevery = "0.4s"\n'
        'command = ["sh", "-c", "sleep 0.2; echo extract $ROTA_SLOT >> $OUT"]\n'
    )
    proc = cli.start()
    cli.wait(lambda: sum(line.startswith("load") for line in cli.lines()) >= 3, 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    lines = [(job, float(slot)) for job, slot in (line.split() for line in cli.lines())]
    for i, (job, slot) in enumerate(lines):
        if job == "load":  # each load after extract's latest slot at or before its own
            extracts = [s for j, s in lines if j == "extract" and s <= slot]
            assert extracts
            assert ("extract", max(extracts)) in lines[:i]
