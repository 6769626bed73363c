"""``enqueue`` jobs and ``[brokers]`` in a job file, under ``rota run``."""

from __future__ import annotations

import ast
import signal
import sqlite3
from pathlib import Path

import pytest

from rota.cli._jobfile import HANDOFF, load
from rota.cli._values import JobFileError
from tests.cli.conftest import Cli
from tests.handoff.conftest import Worker


def test_a_job_file_hands_each_slot_to_a_worker(redis_url: str, tmp_path: Path) -> None:
    """A node runs an ``enqueue`` job every second; an RQ worker then runs each slot
    once, with its key; the broker's URL comes from the environment, never the file."""
    cli = Cli(tmp_path)
    cli.env["QUEUE_URL"] = redis_url
    cli.write(
        '[brokers]\nmain = { env = "QUEUE_URL" }\n'
        '[[jobs]]\nid = "report"\nevery = "1s"\nargs = [3]\n'
        'enqueue = { rq = "tests.handoff.apps.rq_report" }\n'
    )

    def published() -> int:
        return len([r for r in cli.json("history", "report") if r["result"] == "ok"])

    proc = cli.start()
    try:
        cli.wait(cli.loaded)  # the store exists
        cli.wait(lambda: published() >= 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
    keys = {f"report@{r['slot']!r}" for r in cli.json("history", "report")
            if r["result"] == "ok"}  # fmt: skip
    worker = Worker("rq", redis_url, tmp_path / "runs.db")
    try:
        ran = worker.wait_for(len(keys))
    finally:
        worker.stop()
    assert set(ran) == keys
    assert all(n == 1 for n in ran.values())


def test_an_enqueue_job_with_window_gives_the_worker_the_window_of_each_run(
    redis_url: str, tmp_path: Path
) -> None:
    """``window = true``: the worker's task gets ``window_start``/``window_end``
    keyword arguments, each run's window ending at its slot and beginning at the one
    before (the first: a period before it)."""
    cli = Cli(tmp_path)
    cli.env["QUEUE_URL"] = redis_url
    cli.write(
        '[brokers]\nmain = { env = "QUEUE_URL" }\n'
        '[[jobs]]\nid = "report"\nevery = "1s"\nargs = [3]\n'
        'enqueue = { rq = "tests.handoff.apps.rq_window", window = true }\n'
    )
    proc = cli.start()
    try:
        cli.wait(cli.loaded)
        cli.wait(
            lambda: len([r for r in cli.json("history", "report") if r["result"] == "ok"]) >= 3
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    slots = sorted(r["slot"] for r in cli.json("history", "report") if r["result"] == "ok")
    worker = Worker("rq", redis_url, tmp_path / "runs.db")
    try:
        worker.wait_for(len(slots))
    finally:
        worker.stop()
    db = sqlite3.connect(tmp_path / "runs.db")
    got = {key: ast.literal_eval(args) for key, args in db.execute("SELECT key, args FROM runs")}
    db.close()
    for before, slot in zip([slots[0] - 1, *slots], slots, strict=False):
        assert got[f"report@{slot!r}"] == (3, before, slot)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('enqueue = { kafka = "x" }', "one of celery, rq, dramatiq, arq"),
        ('enqueue = { rq = "x", celery = "y" }', "one of celery, rq, dramatiq, arq"),
        ('enqueue = { rq = "x", broker = "nope" }', "no broker 'nope' here"),
        ('enqueue = { rq = "x" }\ncommand = "true"', "give exactly one of"),
        ('enqueue = { rq = "x" }\ntimeout = "1m"', "go with 'command', not 'enqueue'"),
        ('enqueue = { rq = "x", window = "yes" }', "window must be a bool"),
    ],
)
def test_bad_enqueue_jobs_are_refused_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[brokers]\nmain = "redis://127.0.0.1:1/0"\n[[jobs]]\nid = "j"\n'
                    f'every = "1m"\n{text}\n')  # fmt: skip
    with pytest.raises(JobFileError, match=message):
        load(jobs)


def test_an_enqueue_job_stores_its_brokers_name_only(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[brokers]\nq = "redis://:s3cret@127.0.0.1:1/0"\n[[jobs]]\nid = "j"\nevery = "1m"\n'
        'kwargs = { day = "mon" }\nenqueue = { celery = "proj.report", queue = "reports" }\n'
    )
    (job,) = load(jobs)
    assert job.action == HANDOFF
    assert job.kwargs == {"target": "celery", "name": "proj.report", "broker": "q",
                          "queue": "reports", "args": [], "kwargs": {"day": "mon"}}  # fmt: skip
    assert "s3cret" not in repr(job.options())


def test_the_handoff_demo_publishes_and_runs_every_slot_once(redis_url: str) -> None:
    """``examples/handoff_demo.py`` (``make demo``): its own Redis, node and worker."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "handoff_demo.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "every slot once" in done.stdout


def test_a_failing_publish_names_its_slot_and_key_and_logs_no_traceback(tmp_path: Path) -> None:
    """Its retry's log line named the retry's time, never the slot or key; failing for
    good, it logged a traceback of rota's own frames (a job's failure logs none)."""
    cli = Cli(tmp_path)
    cli.write(
        '[brokers]\nmain = "redis://127.0.0.1:1/0"\n'  # nothing listens on port 1
        '[[jobs]]\nid = "report"\nat = "2020-01-01T00:00:00Z"\nmax_retries = 1\n'
        'retry = { base = "0.1s" }\nenqueue = { rq = "tests.handoff.apps.rq_report" }\n'
    )
    log = tmp_path / "log"
    proc = cli.start(log=log)
    try:
        cli.wait(lambda: cli.loaded() and cli.json("status")[0]["status"] == "failed", 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    lines = [line for line in log.read_text().splitlines() if "task 'report'" in line]
    retry, failed = [line for line in lines if " retry " in line or " failed " in line]
    for line in (retry, failed):
        assert "slot 2020-01-01T00:00:00.000+00:00, key report@1577836800.0" in line
    assert "Traceback" not in log.read_text()
