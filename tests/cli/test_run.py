"""``rota run`` and the control commands, end to end: real processes, real SQLite files."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.conftest import Cli, _task

ROOT = Path(__file__).resolve().parents[2]


FACTS = "$ROTA_TASK_ID $ROTA_SLOT $ROTA_ATTEMPT $ROTA_KEY"
RECORD = f'command = ["sh", "-c", "echo {FACTS} >> $OUT"]'


def test_run_executes_commands_with_their_facts_and_stops_on_sigterm(cli: Cli) -> None:
    cli.write(f'[[jobs]]\nid = "tick"\nevery = "0.3s"\n{RECORD}\n')
    proc = cli.start()
    cli.wait(lambda: len(cli.lines()) >= 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    rows = [line.split() for line in cli.lines()]
    for task_id, slot, attempt, key in rows:
        assert (task_id, attempt, key) == ("tick", "0", f"tick@{slot}")
        assert repr(float(slot)) == slot
    slots = [float(r[1]) for r in rows]
    assert all(abs(b - a - 0.3) < 1e-6 for a, b in itertools.pairwise(slots))
    status = cli.json("status")
    assert status[0]["id"] == "tick"
    assert status[0]["status"] == "scheduled"
    assert status[0]["paused"] is False
    assert isinstance(status[0]["next"], float)
    history = cli.json("history", "tick", "--limit", "2")
    assert [h["result"] for h in history] == ["ok", "ok"]
    assert history[0]["at"] > history[1]["at"]
    assert set(history[0]) >= {"at", "result", "attempt", "error", "started"}


def test_commands_get_the_window_each_run_covers(cli: Cli) -> None:
    """``ROTA_WINDOW_START``/``ROTA_WINDOW_END``: each run covers from the slot before
    its own (the first, one period before it) to its slot; they tile time."""
    cli.write(
        '[[jobs]]\nid = "tick"\nevery = "0.3s"\n'
        'command = ["sh", "-c", "echo $ROTA_WINDOW_START $ROTA_WINDOW_END $ROTA_SLOT >> $OUT"]\n'
    )
    proc = cli.start()
    cli.wait(lambda: len(cli.lines()) >= 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    rows = [line.split() for line in cli.lines()]
    assert all(end == slot and repr(float(start)) == start for start, end, slot in rows)
    assert abs(float(rows[0][1]) - float(rows[0][0]) - 0.3) < 1e-6
    assert [start for start, _, _ in rows[1:]] == [end for _, end, _ in rows[:-1]]


def test_sigterm_waits_for_the_run_in_flight(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "slow"\nevery = "1h"\nstart = "2020-01-01T00:00:00+00:00"\n'
              'misfire = "coalesce"\n'
              'command = "echo started >> $OUT; sleep 1; echo done >> $OUT"\n')  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: cli.lines() == ["started"], 60)  # the run has started
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert cli.lines() == ["started", "done"]
    [run] = cli.json("history", "slow")
    assert run["result"] == "ok"


def test_sigkill_and_restart_lose_no_slot(cli: Cli) -> None:
    cli.write(f'[[jobs]]\nid = "tick"\nevery = "0.25s"\n{RECORD}\n')
    first = cli.start()
    cli.wait(lambda: len(cli.lines()) >= 3)
    first.kill()
    first.wait()
    time.sleep(1.0)  # four slots pass with nothing running
    second = cli.start()
    # a run the killed node had claimed waits out its lease (30 s) before it is taken over
    cli.wait(lambda: len(cli.lines()) >= 12, 90)
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    history = cli.json("history", "tick", "--limit", "1000")
    slots = sorted(h["slot"] for h in history)
    assert all(abs(b - a - 0.25) < 1e-6 for a, b in itertools.pairwise(slots))
    assert len(slots) == len(set(slots))  # each completed once


def test_two_processes_on_one_file_run_each_slot_once(cli: Cli) -> None:
    cli.write(f'[[jobs]]\nid = "a"\nevery = "0.2s"\n{RECORD}\n'
              f'[[jobs]]\nid = "b"\nevery = "0.3s"\n{RECORD}\n')  # fmt: skip
    procs = [cli.start(), cli.start()]
    cli.wait(lambda: len(cli.lines()) >= 20)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    assert codes == [0, 0], [proc.communicate()[1] for proc in procs]  # what they said
    keys = [line.split()[3] for line in cli.lines()]
    assert len(keys) == len(set(keys))  # no slot ran twice
    assert len(cli.json("status")) == 2  # and the file was loaded once


def test_status_lists_a_row_it_cannot_read_and_says_why(cli: Cli) -> None:
    """One corrupt row (a disk fault, a hand edit) hides no other task from ``status``,
    and keeps no node from starting."""
    cli.write(f'[[jobs]]\nid = "bad"\nevery = "1h"\n{RECORD}\n'
              f'[[jobs]]\nid = "good"\nevery = "1h"\n{RECORD}\n')  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: cli("status").returncode == 0 and cli("status").stdout.count("\n") == 4)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    with sqlite3.connect(cli.dir / "state.db") as db:
        db.execute("UPDATE rota_tasks SET spec = '{not json' WHERE task_id = 'bad'")
    bad, good = cli.json("status")
    assert (bad["id"], bad["status"], good["id"], good["unreadable"]) == (
        "bad", "scheduled", "good", None)  # fmt: skip
    assert "not valid JSON" in bad["unreadable"]
    text = cli("status")
    assert text.returncode == 0
    assert "cannot be read here" in text.stdout
    assert cli("history", "bad").returncode == 0  # its outcomes are readable
    assert cli("pause", "bad").returncode == 2  # a change cannot be decided on it
    err = cli.live(1.5)  # and a node still starts
    assert "job 'bad' not loaded, its stored row left as it is" in err
    assert "cannot be read here" in err  # the live view says so too


def test_pause_resume_trigger_and_cancel_from_another_process(cli: Cli) -> None:
    cli.write(f'[[jobs]]\nid = "t"\nevery = "1h"\n{RECORD}\n')
    proc = cli.start()
    cli.wait(lambda: cli("status").returncode == 0 and "t " in cli("status").stdout)
    assert cli("trigger", "t").returncode == 0  # runs now, outside its schedule
    cli.wait(lambda: len(cli.lines()) == 1)
    assert cli("pause", "t").returncode == 0
    assert cli.json("status")[0]["paused"] is True
    assert cli("pause", "t").returncode == 1  # already paused: does not apply
    assert cli("trigger", "t").returncode == 1  # paused: does not apply
    assert cli("resume", "t").returncode == 0
    assert cli("cancel", "t").returncode == 0
    assert cli.json("status")[0]["status"] == "cancelled"
    for command in ("pause", "resume", "cancel", "trigger", "history"):
        done = cli(command, "nope")
        assert done.returncode == 1, command
        assert "no task 'nope'" in done.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_timeout_kills_the_whole_process_group(cli: Cli) -> None:
    marker = f"{time.time():.6f}"
    cli.write('[[jobs]]\nid = "hang"\nat = "2020-01-01T00:00:00+00:00"\ntimeout = "0.5s"\n'
              f'command = "sleep 3{marker[-4:]} & sleep 3{marker[-4:]}"\n')  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: cli("history", "hang").stdout.strip() != "")
    [run] = cli.json("history", "hang")
    assert run["result"] == "failed"
    assert "timed out after 0.5s" in run["error"]
    time.sleep(0.2)
    left = subprocess.run(
        ["pgrep", "-f", f"sleep 3{marker[-4:]}"], capture_output=True, check=False
    )
    assert left.stdout == b""  # the background child died with the group
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_descendant_that_leaves_the_group_holds_no_run_or_shutdown(cli: Cli) -> None:
    """``setsid`` takes a child out of the command's process group, with the output pipe:
    the run still ends (its command exited), and so does ``rota run`` on SIGTERM."""
    marker = f"4{time.time_ns() % 10**6:06d}"
    cli.write('[[jobs]]\nid = "escape"\nat = "2020-01-01T00:00:00+00:00"\ntimeout = "2s"\n'
              f'command = "setsid sleep {marker} & echo started"\n')  # fmt: skip
    try:
        began = time.monotonic()
        proc = cli.start()
        cli.wait(lambda: cli("history", "escape").stdout.strip() != "")
        assert time.monotonic() - began < 15  # was 40 s and more: the pipe's EOF
        [run] = cli.json("history", "escape")
        assert run["result"] == "ok", run
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)


def test_a_row_naming_any_import_path_runs_on_no_node_that_did_not_declare_it(
    cli: Cli,
) -> None:
    """Whoever can write the store could plant a row naming ``os:system``: a
    ``rota run`` node runs only its job file's jobs, and leaves that row as it is
    (it ran the command before: any import path in a row was run)."""
    from rota import DurableScheduler
    from rota.store import SQLiteStore

    planted = cli.dir / "planted"
    cli.write(f'[[jobs]]\nid = "tick"\nevery = "0.2s"\n{RECORD}\n')
    proc = cli.start()
    cli.wait(lambda: len(cli.lines()) >= 1)  # the node is up and running its job
    writer = DurableScheduler(SQLiteStore(cli.dir / "state.db"))
    writer.schedule_once("evil", 0, "os:system", args=[f"touch {planted}"])
    count = len(cli.lines())
    cli.wait(lambda: len(cli.lines()) >= count + 5)  # it claimed five times since
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not planted.exists()
    row = writer.store.get("evil")
    assert row is not None
    assert (row.status, row.fence) == ("scheduled", 0)  # untouched
    writer.store.close()


def test_a_run_cut_short_by_a_graceful_stop_is_given_back_not_failed(cli: Cli) -> None:
    """SIGTERM with a grace shorter than the run: the command is terminated, and its
    run is given back (nothing recorded, the job still scheduled) rather than
    recorded as failed; the next node runs it again with the same key. Before, a
    one-off ended `failed` (SIGKILL instead left it to be run again)."""
    cli.write('[[jobs]]\nid = "long"\nat = "2020-01-01T00:00:00+00:00"\n'
              'command = "echo $ROTA_KEY >> $OUT; test -e $OUT.go || sleep 30"\n')  # fmt: skip
    proc = cli.start("--grace", "0.5s")
    cli.wait(lambda: len(cli.lines()) == 1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "given back" in err
    assert " retry (attempt 0)" not in err  # it said so, though the next node runs it
    [job] = cli.json("status")
    assert job["status"] == "scheduled", job
    assert cli.json("history", "long") == []
    (cli.dir / "out.go").touch()
    again = cli.start()
    cli.wait(lambda: cli.json("history", "long") != [])
    again.send_signal(signal.SIGTERM)
    assert again.wait(30) == 0
    [run] = cli.json("history", "long")
    assert run["result"] == "ok"
    first, second = cli.lines()
    assert first == second  # the same key


def test_read_commands_need_no_write_lock(cli: Cli) -> None:
    """``status`` and ``history`` only read: another process holding the write lock
    (or a read-only file) does not stop them. Opening the store ran a write
    transaction, which waited out the lock (and failed on a read-only file)."""
    cli.write(f'[[jobs]]\nid = "tick"\nevery = "1h"\n{RECORD}\n')
    proc = cli.start()
    cli.wait(cli.loaded)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    lock = sqlite3.connect(cli.dir / "state.db", isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")
        for command in (("status",), ("history", "tick")):
            start = time.monotonic()
            done = cli(*command)
            assert done.returncode == 0, done.stderr
            assert time.monotonic() - start < 10  # the busy timeout is 30 s
    finally:
        lock.close()


def test_concurrent_triggers_each_run_once(cli: Cli) -> None:
    """Ten ``rota trigger sync`` at once: every one that answers ``trigger: sync``
    is a run (they made 1 run on SQLite, 6 of 8 on PostgreSQL, all answering the
    same)."""
    cli.write('[[jobs]]\nid = "sync"\nevery = "1h"\ncommand = "echo $ROTA_KEY >> $OUT"\n')
    proc = cli.start()
    cli.wait(cli.loaded)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    command = [sys.executable, "-m", "rota", "trigger", "sync", "--store", cli.store]
    out = subprocess.PIPE
    triggers = [
        subprocess.Popen(command, cwd=cli.dir, env=cli.env, text=True, stdout=out, stderr=out)
        for _ in range(10)
    ]
    answers = [t.communicate(timeout=60) for t in triggers]
    accepted = sum(1 for t, (_, err) in zip(triggers, answers, strict=True)
                   if t.returncode == 0 and "trigger: sync" in err)  # fmt: skip
    assert accepted == 10, answers
    proc = cli.start()
    cli.wait(lambda: len(cli.json("history", "sync", "--limit", "50")) >= accepted)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert len(cli.json("history", "sync", "--limit", "50")) == accepted
    assert len(set(cli.lines())) == accepted  # each its own key


def test_a_job_file_chooses_what_a_command_inherits(cli: Cli) -> None:
    """A command inherits the node's whole environment (its store password, cloud
    keys) unless its job says otherwise: ``inherit_env = false`` (or a list of names)
    keeps only a base (PATH, HOME, ...), and ``env`` adds variables of its own."""
    cli.env["SECRET"] = "s3cret"
    cli.write('[[jobs]]\nid = "plain"\nat = "2020-01-01T00:00:00+00:00"\n'
              'command = "echo plain ${SECRET:-none} >> $OUT"\n'
              '[[jobs]]\nid = "clean"\nat = "2020-01-01T00:00:00+00:00"\n'
              'inherit_env = ["OUT"]\nenv = { GREETING = "hi" }\n'
              'command = "echo clean ${SECRET:-none} $GREETING ${PATH:+path} >> $OUT"\n'
              )  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: len(cli.lines()) == 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert sorted(cli.lines()) == ["clean none hi path", "plain s3cret"]
    cli.write('[[jobs]]\nid = "bad"\nat = "2020-01-01T00:00:00+00:00"\n'
              'inherit_env = "no"\ncommand = "true"\n')  # fmt: skip
    command = [sys.executable, "-m", "rota", "plan", str(cli.jobs)]
    done = subprocess.run(command, cwd=cli.dir, env=cli.env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "inherit_env" in done.stderr


def test_call_jobs_and_failures_with_output_in_history(cli: Cli) -> None:
    cli.write('[defaults]\nmax_retries = 1\nretry = { base = "0.1s" }\n'
              '[[jobs]]\nid = "c"\nat = "2020-01-01T00:00:00+00:00"\ncall = "json:dumps"\n'
              'args = [[1, "a"]]\n'
              '[[jobs]]\nid = "f"\nat = "2020-01-01T00:00:00+00:00"\n'
              'command = "echo boom; exit 3"\n')  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: {"id": "f", "status": "failed"}.items() <= _task(cli, "f").items())
    [ok] = cli.json("history", "c")
    assert (ok["result"], ok["output"]) == ("ok", '[1, "a"]')
    failed, retried = cli.json("history", "f")
    assert (retried["result"], failed["result"], failed["attempt"]) == ("retry", "failed", 1)
    assert "exit status 3" in failed["error"]
    assert "boom" in failed["error"]
    human = cli("history", "f").stdout
    assert "boom" in human
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_the_live_view_shows_jobs_next_runs_and_failures(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "ok"\nevery = "0.2s"\ncommand = "true"\n'
              '[[jobs]]\nid = "bad"\nevery = "0.2s"\ncommand = "echo nope; exit 1"\n')  # fmt: skip
    err = cli.live(2.0)
    for shown in ("job", "next run", "last run", "result", "ok", "bad", "latest failures"):
        assert shown in err, shown


def test_run_and_status_on_postgresql(cli: Cli, pg_dsn: str, pg_prefix: str) -> None:
    import psycopg

    dbname = pg_prefix.rstrip("_")
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {dbname}")
    try:
        params = dict(part.split("=", 1) for part in pg_dsn.split())
        cli.store = f"postgresql://{params['user']}@{params['host']}:{params['port']}/{dbname}"
        cli.write(f'[[jobs]]\nid = "tick"\nevery = "0.3s"\n{RECORD}\n')
        procs = [cli.start(), cli.start()]
        cli.wait(lambda: len(cli.lines()) >= 4)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(30) for proc in procs] == [0, 0]
        keys = [line.split()[3] for line in cli.lines()]
        assert len(keys) == len(set(keys))
        [task] = cli.json("status")
        assert (task["id"], task["status"]) == ("tick", "scheduled")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute(f"DROP DATABASE {dbname} WITH (FORCE)")


def test_backfill_from_another_process_runs_each_missed_slot_once(cli: Cli) -> None:
    """``rota backfill`` queues the slots a running node then runs, oldest first, each
    with its own key; slots already recorded, and the live schedule's, are not queued."""
    cli.write(
        f'[[jobs]]\nid = "t"\nevery = "1h"\nstart = "2026-01-01T00:00:00+00:00"\n'
        f'misfire = "skip"\n{RECORD}\n'
    )
    proc = cli.start()
    cli.wait(lambda: cli("status").returncode == 0 and "t " in cli("status").stdout)
    done = cli("backfill", "t", "--from=-3h", "--until=-1h")
    assert done.returncode == 0, done.stderr
    assert "2 slots queued" in done.stderr
    cli.wait(lambda: len(cli.lines()) == 2)
    slots = [float(line.split()[1]) for line in cli.lines()]
    assert slots == sorted(slots)
    assert slots[1] - slots[0] == 3600
    again = cli("backfill", "t", "--from=-3h", "--until=-1h")
    assert "0 slots queued" in again.stderr  # recorded now: not run again
    assert cli("backfill", "nope", "--from=-1h").returncode == 1
    assert cli("backfill", "t", "--from=-1h", "--until=-2h").returncode == 2
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def _start_spans(cli: Cli, keys: str, sleep: float) -> subprocess.Popen[str]:
    """``rota run`` of one job (``keys``) whose command writes ``start KEY`` and
    ``end KEY`` to $OUT around a sleep of ``sleep`` seconds."""
    cli.write(
        f'[[jobs]]\n{keys}\ncommand = ["sh", "-c", "echo start $ROTA_KEY >> $OUT; '
        f'sleep {sleep:g}; echo end $ROTA_KEY >> $OUT"]\n'
    )
    return cli.start()


def test_a_job_under_allow_n_runs_that_many_at_once_and_no_more(cli: Cli) -> None:
    """``overlap = { allow = 2 }``: runs of 0.9 s every 0.3 s, two in flight at once
    (never three), each with its own slot and key; every slot runs, none twice."""
    proc = _start_spans(cli, 'id = "crawl"\nevery = "0.3s"\noverlap = { allow = 2 }', 0.9)
    cli.wait(lambda: sum(line.startswith("end") for line in cli.lines()) >= 6, 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    flying, most = 0, 0
    for line in cli.lines():
        flying += 1 if line.startswith("start") else -1
        most = max(most, flying)
    assert most == 2
    starts = [line.split()[1] for line in cli.lines() if line.startswith("start")]
    assert len(starts) == len(set(starts))  # each slot once, under its own key
    history = cli.json("history", "crawl", "--limit", "100")
    assert sorted(h["at"] for h in history) == sorted(float(k.split("@")[1]) for k in starts)
    assert {h["result"] for h in history} == {"ok"}


def test_a_job_under_replace_ends_the_command_in_flight_for_the_next_slot(cli: Cli) -> None:
    """``overlap = "replace"``: a command still running when its next slot falls due
    has its process group ended (recorded ``cancelled``, not retried); the next slot's
    command starts once it has, so two never run at once."""
    proc = _start_spans(cli, 'id = "sync"\nevery = "1s"\noverlap = "replace"\nmax_retries = 2', 3)
    cli.wait(lambda: sum(line.startswith("start") for line in cli.lines()) >= 3, 60)
    proc.send_signal(signal.SIGTERM)  # the run in flight then is let finish
    assert proc.wait(60) == 0
    history = cli.json("history", "sync", "--limit", "100")
    replaced = {f"sync@{h['slot']!r}" for h in history if h["result"] == "cancelled"}
    assert len(replaced) >= 2
    assert all(
        "replaced by its next slot" in h["error"] for h in history if h["result"] == "cancelled"
    )
    ended = {line.split()[1] for line in cli.lines() if line.startswith("end")}
    assert not ended & replaced  # each replaced command was ended before its end
    assert {h["attempt"] for h in history} == {0}  # a replaced run is not retried
    spans = sorted((h["started"], h["finished"]) for h in history)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start  # one at a time: the next started once the last had ended


def test_a_node_whose_runner_stops_by_itself_exits_non_zero(cli: Cli) -> None:
    """An action that raises SystemExit stops the runner (a fatal error). Before, the
    node went on idling, running nothing, until a signal, then exited 0."""
    cli.write('[[jobs]]\nid = "quit"\nevery = "0.2s"\ncall = "sys:exit"\nargs = [3]\n')
    proc = cli.start()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 70, err
    assert "CRITICAL" in err
    assert "the dispatcher had ended" in err
