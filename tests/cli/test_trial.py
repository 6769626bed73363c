"""What a new user's trial of the command found (issue 42, item 8): each as run."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

import rota
from rota import DurableScheduler, Once
from rota.store import SQLiteStore
from tests.cli.conftest import Cli


def _rota(cli: Cli, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rota", *args], cwd=cli.dir, env=cli.env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_version(cli: Cli) -> None:
    done = _rota(cli, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"rota {rota.__version__}"


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        ('["no-such-prog-xyz", "--flag"]', "no-such-prog-xyz"),
        ('"no-such-prog-xyz --flag | tee out"', "no-such-prog-xyz"),
    ],
)
def test_plan_refuses_a_command_whose_program_is_nowhere(
    cli: Cli, command: str, missing: str
) -> None:
    cli.write(f'[[jobs]]\nid = "typo"\nevery = "1m"\ncommand = {command}\n')
    done = _rota(cli, "plan", str(cli.jobs))
    assert done.returncode == 2
    assert f"job 'typo': key 'command': no program {missing!r} on the PATH" in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        '["/opt/later/bin/tool"]',  # a path: it may be installed after the file is written
        '"./run.sh"',
        '"exit 3"',  # shell builtins and keywords are no programs
        '"cd /tmp && ls"',
        '"FOO=1 env"',
        '"$HOME/bin/x"',
    ],
)
def test_plan_accepts_paths_and_shell_words(cli: Cli, command: str) -> None:
    cli.write(f'[[jobs]]\nid = "ok"\nevery = "1m"\ncommand = {command}\n')
    done = _rota(cli, "plan", str(cli.jobs), "--until", "+2m")
    assert done.returncode == 0, done.stderr


def test_an_empty_job_file_is_refused(cli: Cli) -> None:
    cli.write("# nothing yet\n[defaults]\ntz = 'UTC'\n")
    for sub in ("plan", "run"):
        done = _rota(cli, sub, str(cli.jobs), *(["--store", cli.store] if sub == "run" else []))
        assert done.returncode == 2
        assert "no [[jobs]]: a job file declares at least one job" in done.stderr


def test_a_period_below_the_floor_is_refused_saying_why(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "spin"\nevery = "1ms"\ncommand = "true"\n')
    done = _rota(cli, "plan", str(cli.jobs))
    assert done.returncode == 2
    assert "job 'spin': key 'every': '1ms' is below the floor of 100ms" in done.stderr
    cli.write('[[jobs]]\nid = "fast"\nevery = "100ms"\ncommand = "true"\n')
    assert _rota(cli, "plan", str(cli.jobs), "--until", "+1s").returncode == 0


def test_status_marks_an_overdue_next_run(cli: Cli) -> None:
    """By the rule ``check`` follows: past its grace (a minute, or one period)."""
    store = SQLiteStore(cli.dir / "state.db")
    sched = DurableScheduler(store)
    now = time.time()
    sched.schedule("late", Once(at=now - 7200), "tests.durable.jobs:noop", args=[0])
    sched.schedule("soon", Once(at=now - 5), "tests.durable.jobs:noop", args=[0])
    sched.schedule("fine", Once(at=now + 3600), "tests.durable.jobs:noop", args=[0])
    store.close()
    lines = {line.split()[0]: line for line in cli("status").stdout.splitlines()[1:]}
    assert "(overdue)" in lines["late"]
    assert "(overdue)" not in lines["soon"]  # within its grace
    assert "(overdue)" not in lines["fine"]
    problems = cli("check").stdout
    assert "late: overdue" in problems
    assert "soon" not in problems


def test_start_up_names_cancelled_jobs_that_will_not_run(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "gone"\nevery = "1h"\ncommand = "true"\n'
              '[[jobs]]\nid = "on"\nevery = "1h"\ncommand = "true"\n')  # fmt: skip
    proc = cli.start()
    cli.wait(cli.loaded)
    assert cli("cancel", "gone").returncode == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    log = cli.dir / "log"
    proc = cli.start(log=log)
    cli.wait(lambda: "jobs loaded" in log.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    [line] = [line for line in log.read_text().splitlines() if "cancelled jobs" in line]
    assert re.search(r"WARNING .*1 cancelled jobs will not run until their definition", line)
    assert line.endswith(": gone")


def test_a_library_cron_task_is_shown_in_its_own_zone(cli: Cli) -> None:
    """Stored through the library (no job file's ``tz``): its cron's zone is its
    zone, not this machine's (it showed ``+00:00``)."""
    from rota.cron import Cron

    store = SQLiteStore(cli.dir / "state.db")
    sched = DurableScheduler(store)
    sched.schedule("berlin", Cron("0 3 * * *", tz="Europe/Berlin"), "tests.durable.jobs:noop",
                   args=[0])  # fmt: skip
    store.close()
    [line] = cli("status").stdout.splitlines()[1:-1]  # (the last: retention)
    assert "T03:00:00+01:00" in line or "T03:00:00+02:00" in line


def test_plans_summary_is_in_the_jobs_zone(cli: Cli) -> None:
    cli.write('[defaults]\ntz = "Asia/Tokyo"\n[[jobs]]\nid = "a"\nevery = "1h"\n'
              'command = "true"\n')  # fmt: skip
    done = _rota(cli, "plan", str(cli.jobs))
    assert done.returncode == 0
    [summary] = [line for line in done.stderr.splitlines() if " runs of 1 jobs in " in line]
    assert summary.count("+09:00") == 2


def test_a_run_waiting_for_a_worker_is_said_and_shown(cli: Cli) -> None:
    """One worker, held by a slow job: the quick jobs' due runs wait. Before, nothing
    said so (and the default was 4 workers, too few for a crontab of shell jobs)."""
    cli.write('[[jobs]]\nid = "slow"\nevery = "1h"\nstart = "2020-01-01T00:00:00Z"\n'
              'misfire = "coalesce"\ncommand = "echo started >> $OUT; sleep 15"\n'
              '[[jobs]]\nid = "quick"\nevery = "0.5s"\ncommand = "true"\n'
              '[[jobs]]\nid = "quick-2"\nevery = "0.5s"\ncommand = "true"\n')  # fmt: skip
    log = cli.dir / "log"
    proc = cli.start("--workers", "1", "--grace", "1s", log=log)
    cli.wait(lambda: "started" in cli.lines(), 30)
    cli.wait(lambda: "due runs wait for a worker: all 1 workers are busy" in log.read_text(), 10)
    [line] = [line for line in log.read_text().splitlines() if "wait for a worker" in line]
    assert " WARNING " in line
    # one quick job is claimed ahead of the busy worker (running, to other processes);
    # the other, due and unclaimed, waits
    cli.wait(lambda: "(waiting for a worker)" in cli("status").stdout, 10)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    assert "default 32" in _rota(cli, "run", "--help").stdout


def test_log_output_caps_or_silences_a_chatty_job(cli: Cli) -> None:
    """Every line a command printed was logged: 400,000 lines in 70 s for one job."""
    cli.write(
        "[defaults]\nlog_output = 3\n"
        '[[jobs]]\nid = "capped"\nevery = "1h"\nstart = "2020-01-01T00:00:00Z"\n'
        'misfire = "coalesce"\ncommand = "seq 1 50; echo capped >> $OUT"\n'
        '[[jobs]]\nid = "quiet"\nevery = "1h"\nstart = "2020-01-01T00:00:00Z"\n'
        'misfire = "coalesce"\nlog_output = false\ncommand = "seq 1 50; echo quiet >> $OUT"\n'
        '[[jobs]]\nid = "default"\nevery = "1h"\nstart = "2020-01-01T00:00:00Z"\n'
        'misfire = "coalesce"\nlog_output = true\ncommand = "seq 1 1500; echo default >> $OUT"\n'
    )
    log = cli.dir / "log"
    proc = cli.start(log=log)
    cli.wait(lambda: sorted(cli.lines()) == ["capped", "default", "quiet"], 30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    logged = [line for line in log.read_text().splitlines() if "rota.output" in line]
    assert len([line for line in logged if "job 'capped': " in line]) == 4
    assert "job 'capped': 47 more lines of this run were not logged (log_output = 3)" in (
        log.read_text()
    )
    assert not [line for line in logged if "job 'quiet'" in line]
    assert len([line for line in logged if "job 'default': " in line]) == 1001
    assert cli.json("history", "quiet")[0]["output"].endswith("50\n")  # still kept
    cli.write('[[jobs]]\nid = "x"\nevery = "1h"\ncommand = "true"\nlog_output = -1\n')
    done = _rota(cli, "plan", str(cli.jobs))
    assert done.returncode == 2
    assert "key 'log_output': true, false, or a number of lines" in done.stderr


def test_jitter_is_not_counted_as_lag(cli: Cli) -> None:
    """A ``jitter = "10s"`` job logged a lag of 11 s and tripped the lag alert."""
    cli.write('[[jobs]]\nid = "spread"\nevery = "1s"\njitter = "0.8s"\ncommand = "true"\n')
    log = cli.dir / "log"
    proc = cli.start(log=log)
    cli.wait(lambda: log.read_text().count("task 'spread': run at") >= 4, 30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    line = r"task 'spread': run at .* lag ([\d.]+)s(?: \(after a jitter of ([\d.]+)s\))?"
    runs = re.findall(line, log.read_text())
    assert len(runs) >= 4
    assert all(float(lag) < 0.5 for lag, _ in runs), runs  # the jitter is said apart:
    assert any(jitter and float(jitter) > 0.05 for _, jitter in runs), runs  # in [0, 0.8)
