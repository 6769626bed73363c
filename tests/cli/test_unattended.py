"""Running unattended, end to end (``cli.md``, "Running unattended"): the job file as
desired state, SIGHUP, cancel ending a command, ``check``, read commands that create
nothing, and no password in any output. Real processes, real SQLite files."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.cli.conftest import Cli, _task
from tests.helpers import wait_until

EVERY = 'every = "1h"\nstart = "2020-01-01T00:00:00+00:00"\nmisfire = "coalesce"\n'


def job(job_id: str, command: str = "echo $ROTA_TASK_ID >> $OUT", extra: str = "") -> str:
    return f'[[jobs]]\nid = "{job_id}"\n{EVERY}command = "{command}"\n{extra}'


def ran(cli: Cli) -> list[str]:
    return cli.lines()


def test_read_commands_refuse_a_store_that_does_not_exist_and_create_nothing(
    tmp_path: Path,
) -> None:
    for args in (["status"], ["history", "x"], ["pause", "x"], ["check"], ["status", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "rota", *args], cwd=tmp_path, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert str(tmp_path / "rota.db") in done.stderr
        assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_no_password_in_any_output(tmp_path: Path) -> None:
    url = "postgresql://app:s3cretpw@127.0.0.1:1/app"  # nothing listens on port 1
    (tmp_path / "jobs.toml").write_text(job("a"))
    commands = (["status"], ["check", "--json"], ["history", "a"], ["cancel", "a"],
                ["run", "jobs.toml", "--live", "no"])  # fmt: skip
    # at once: each retries its connection for about 11 s before it gives up
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rota", "--log-level", "DEBUG", *args, "--store", url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    for args, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, err)
        assert "s3cretpw" not in out + err, args
        assert "app:***@127.0.0.1" in err, args


def test_a_bad_flag_value_is_a_usage_error(cli: Cli) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rota", "--log-level", "verbose", "status"],
        cwd=cli.dir, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "'verbose' is not one of DEBUG" in done.stderr


def test_the_job_file_is_the_desired_state_and_sighup_reloads_it(cli: Cli) -> None:
    cli.write(job("keep") + job("drop") + job("change"))
    log = cli.dir / "log"
    proc = cli.start(log=log)
    cli.wait(lambda: sorted(ran(cli)) == ["change", "drop", "keep"], 60)
    cli.write(
        job("keep") + job("new")
        + '[[jobs]]\nid = "change"\nevery = "2h"\ncommand = "echo changed >> $OUT"\n'
    )  # fmt: skip
    proc.send_signal(signal.SIGHUP)
    cli.wait(lambda: "new" in ran(cli), 60)
    assert _task(cli, "drop") == {}  # removed: not listed, its history kept
    assert cli.json("history", "drop")[0]["result"] == "ok"
    assert _task(cli, "change")["status"] == "scheduled"
    cli.write("[[jobs]]\nthis is not toml")
    proc.send_signal(signal.SIGHUP)
    cli.wait(lambda: "reload failed" in log.read_text(), 30)
    [line] = [line for line in log.read_text().splitlines() if "reload failed" in line]
    assert " ERROR " in line
    assert "not valid TOML" in line
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert _task(cli, "keep")["status"] == "scheduled"


def test_two_job_files_on_one_store_each_run_their_own(cli: Cli) -> None:
    other = cli.dir / "other.toml"
    other.write_text(job("theirs", "echo theirs-$ROTA_TASK_ID >> $OUT"))
    cli.write(job("mine"))
    first = cli.start()
    second = subprocess.Popen(
        [sys.executable, "-m", "rota", "run", str(other), "--store", cli.store,
         "--live", "no"],
        cwd=cli.dir, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cli.procs.append(second)
    cli.wait(lambda: sorted(ran(cli)) == ["mine", "theirs-theirs"], 60)
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    shared = cli.dir / "shared.toml"
    shared.write_text(job("mine"))  # an id the first file declares
    done = subprocess.run(
        [sys.executable, "-m", "rota", "run", str(shared), "--store", cli.store],
        cwd=cli.dir, env=cli.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert str(cli.jobs) in done.stderr
    assert sorted(ran(cli)) == ["mine", "theirs-theirs"]  # nothing ran twice meanwhile


def test_a_cancelled_job_comes_back_only_when_its_definition_changed(cli: Cli) -> None:
    cli.write(job("j"))
    proc = cli.start()
    cli.wait(lambda: ran(cli) == ["j"], 60)
    assert cli("cancel", "j").returncode == 0
    done = cli("resume", "j")
    assert done.returncode == 1
    assert "change its definition" in done.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    log = cli.dir / "log"
    proc = cli.start(log=log)  # the same definition: it stays cancelled
    cli.wait(lambda: "jobs loaded" in log.read_text(), 60)
    assert "(0 new or changed, 0 removed)" in log.read_text()
    assert _task(cli, "j")["status"] == "cancelled"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert ran(cli) == ["j"]
    cli.write(job("j", "echo again >> $OUT"))
    proc = cli.start()  # the definition changed: it comes back, as a new job
    cli.wait(lambda: ran(cli) == ["j", "again"], 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_cancel_ends_a_running_command_and_records_the_run_as_cancelled(cli: Cli) -> None:
    cli.write(job("long", "echo $$ >> $OUT; exec sleep 60"))
    proc = cli.start()
    cli.wait(lambda: len(ran(cli)) == 1, 60)
    pid = int(ran(cli)[0])
    assert cli("cancel", "long").returncode == 0
    cli.wait(lambda: not _alive(pid), 30)  # SIGTERM within a poll; SIGKILL after the grace
    cli.wait(lambda: _history(cli, "long") != [], 30)
    [record] = _history(cli, "long")
    assert record["result"] == "cancelled"
    assert _task(cli, "long")["status"] == "cancelled"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _history(cli: Cli, task_id: str) -> list[Any]:
    done = cli("history", task_id, "--json")
    return json.loads(done.stdout) if done.returncode == 0 else []


def test_check_exit_codes(cli: Cli, tmp_path: Path) -> None:
    cli.write(job("fine") + job("broken", "exit 3"))
    proc = cli.start()
    cli.wait(lambda: len(_history(cli, "broken")) == 1 and ran(cli) == ["fine"], 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    done = cli("check", "--json")
    assert done.returncode == 1
    [problem] = json.loads(done.stdout)
    assert (problem["id"], problem["problem"]) == ("broken", "failed")
    assert "exit status 3" in problem["detail"]
    healthy = cli.dir / "healthy.toml"
    healthy.write_text('[[jobs]]\nid = "soon"\nevery = "1h"\ncommand = "true"\n')
    store = f"sqlite:///{tmp_path / 'healthy.db'}"
    loader = subprocess.Popen(
        [sys.executable, "-m", "rota", "run", str(healthy), "--store", store, "--live", "no"],
        cwd=cli.dir, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cli.procs.append(loader)
    cli.wait(lambda: (tmp_path / "healthy.db").exists() and _checked(cli, store) == 0, 60)
    loader.send_signal(signal.SIGTERM)
    assert loader.wait(60) == 0
    late_store = f"sqlite:///{tmp_path / 'late.db'}"
    from rota.durable import DurableScheduler
    from rota.schedules import FixedRate
    from rota.store import SQLiteStore

    node = DurableScheduler(SQLiteStore(tmp_path / "late.db"))  # stored, and no node runs it
    node.schedule("late", FixedRate(1, start=1_000_000_000), "tests.durable.jobs:noop")
    node.store.close()
    done = subprocess.run(
        [sys.executable, "-m", "rota", "check", "--json", "--store", late_store],
        cwd=cli.dir, env=cli.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)[0]["problem"] == "overdue"
    (tmp_path / "junk.db").write_text("not a database")
    done = subprocess.run(
        [sys.executable, "-m", "rota", "check", "--store", f"sqlite:///{tmp_path / 'junk.db'}"],
        cwd=cli.dir, env=cli.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2


def _checked(cli: Cli, store: str) -> int:
    return subprocess.run(
        [sys.executable, "-m", "rota", "check", "--store", store],
        cwd=cli.dir, env=cli.env, capture_output=True, text=True, timeout=60, check=False,
    ).returncode  # fmt: skip


class Hooks:
    """A real HTTP server on 127.0.0.1: records each GET's path; ``/hang...`` answers
    only after a minute (a monitoring endpoint that hangs)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.paths: list[str] = []
        self.release = threading.Event()
        paths, release = self.paths, self.release

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                paths.append(self.path)
                if self.path.startswith("/hang"):
                    release.wait(60)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_ping_and_on_failure_reach_someone(cli: Cli) -> None:
    hooks = Hooks()
    try:
        failures = cli.dir / "failures"
        cli.write(
            job("ok", "true", f'ping = "{hooks.url}/ok"\n')
            + job("bad", "echo broken; exit 1",
                  f'ping = "{hooks.url}/bad"\nmax_retries = 1\nretry = {{ base = "0.1s" }}\n'
                  f'on_failure = "echo $ROTA_TASK_ID $ROTA_KEY $ROTA_ERROR >> '
                  f'{failures}"\n')
        )  # fmt: skip
        proc = cli.start()
        cli.wait(lambda: failures.exists() and "/ok" in hooks.paths, 60)
        cli.wait(lambda: hooks.paths.count("/bad/fail") == 1, 30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert [p for p in hooks.paths if p.startswith("/ok")] == ["/ok/start", "/ok"]
        bad = [p for p in hooks.paths if p.startswith("/bad")]
        assert bad == ["/bad/start", "/bad/start", "/bad/fail"]  # a retry is no failure
        [line] = failures.read_text().splitlines()  # once: retries exhausted
        task_id, key, error = line.split(" ", 2)
        assert task_id == "bad"
        assert key.startswith("bad@")
        assert "exit status 1: broken" in error
    finally:
        hooks.close()


def test_a_hanging_notification_endpoint_delays_no_run(cli: Cli) -> None:
    hooks = Hooks()
    try:
        cli.write(
            '[[jobs]]\nid = "tick"\nevery = "0.2s"\ncommand = "echo tick >> $OUT"\n'
            f'ping = "{hooks.url}/hang"\n'
        )
        proc = cli.start()
        cli.wait(lambda: len(ran(cli)) >= 10, 30)  # 2 s of runs while every ping hangs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert hooks.paths[:1] == ["/hang/start"]
    finally:
        hooks.close()


def test_each_output_line_reaches_the_log_with_its_job(cli: Cli) -> None:
    cli.write(job("talk", "echo one; printf two; echo; echo $ROTA_TASK_ID >> $OUT"))
    log = cli.dir / "log"
    proc = cli.start("--grace", "5s", log=log)
    cli.wait(lambda: ran(cli) == ["talk"] and "two" in log.read_text(), 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    lines = [line for line in log.read_text().splitlines() if "rota.output" in line]
    assert [line.split("rota.output: ")[1] for line in lines] == [
        "job 'talk': one",
        "job 'talk': two",
    ]


def test_call_modules_are_found_next_to_the_job_file_and_plan_runs_none(
    tmp_path: Path,
) -> None:
    here = tmp_path / "jobs"
    here.mkdir()
    (here / "mytasks.py").write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('imported').touch()  # top-level code\n"
        "def tidy():  # asks for nothing: gets nothing\n"
        "    pathlib.Path(__file__).with_name('ran').touch()\n"
    )
    (here / "jobs.toml").write_text(f'[[jobs]]\nid = "tidy"\n{EVERY}call = "mytasks:tidy"\n')
    rota = str(Path(sys.executable).parent / "rota")  # the script, not python -m
    done = subprocess.run([rota, "plan", str(here / "jobs.toml")], cwd="/",
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (here / "imported").exists()  # plan found the module, ran none of it
    store = f"sqlite:///{tmp_path / 's.db'}"
    node = subprocess.Popen(
        [rota, "run", str(here / "jobs.toml"), "--store", store, "--live", "no"],
        cwd="/", stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until((here / "ran").exists, 60)
    finally:
        node.send_signal(signal.SIGTERM)
        assert node.wait(60) == 0


def test_import_crontab_gives_an_equivalent_job_file(tmp_path: Path) -> None:
    (tmp_path / "crontab").write_text(
        "# m h dom mon dow command\n"
        "SHELL=/bin/bash\n"
        "MAILTO=ops@example.com\n"
        'GREETING="hello there"\n'
        "CRON_TZ=Europe/Berlin\n"
        "\n"
        "*/15 * * * * /usr/local/bin/sync --all > /dev/null 2>&1\n"
        "30 2 * * 1-5 /opt/app/report.sh --since yesterday\n"
        "0 0,12 1-7 * * sync\n"
        "@daily /opt/app/backup.sh\n"
        "@reboot /opt/app/warm-cache\n"
        "5 4 * * sun echo weekly %cleanup%\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "rota", "import-crontab", str(tmp_path / "crontab")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "jobs.toml").write_text(done.stdout)
    from rota.cli._jobfile import load

    jobs = {job.id: job for job in load(tmp_path / "jobs.toml")}
    assert list(jobs) == ["sync-all", "report", "sync", "backup"]
    assert [str(getattr(j.when, "expression", "")) for j in jobs.values()] == [
        "*/15 * * * *", "30 2 * * 1-5", "0 0,12 1-7 * *", "0 0 * * *"
    ]  # fmt: skip
    assert all(str(j.zone) == "Europe/Berlin" for j in jobs.values())
    assert jobs["sync-all"].kwargs == {"env": {"GREETING": "hello there"}}
    assert jobs["sync-all"].args == ["/usr/local/bin/sync --all > /dev/null 2>&1", None]
    for kept in ("@reboot /opt/app/warm-cache", "%cleanup%", "MAILTO=", "SHELL="):
        assert kept in done.stdout  # said, as a comment: nothing dropped silently
    bad = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(tmp_path / "jobs.toml"), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 0, bad.stderr


def test_import_crontab_ids_tell_jobs_apart_and_comments_stay_with_them(
    tmp_path: Path,
) -> None:
    """Ids are the commands' own words, as many as tell them apart (they were the
    program's name, numbered: ``php``, ``php-2``); a comment right above a job stays
    right above it; a system crontab's user field is named, not taken for a job."""
    crontab = tmp_path / "crontab"
    crontab.write_text(
        "# artisan's scheduler\n"
        "* * * * * php /var/www/app/artisan schedule:run >> /dev/null 2>&1\n"
        "\n"
        "# nightly cleanup\n"
        "0 3 * * * php /var/www/app/cleanup.php --days 30\n"
        "0 4 * * * /opt/backup.sh --full\n"
        "0 5 * * * /opt/backup.sh --incremental\n"
        "0 0 * * 0 root /usr/bin/weekly-report\n"
    )
    command = [sys.executable, "-m", "rota", "import-crontab", str(crontab)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    ids = re.findall(r'^id = "(.*)"$', done.stdout, re.M)
    assert ids == ["php-artisan", "php-cleanup", "backup-full", "backup-incremental", "root"]
    assert '# artisan\'s scheduler\n[[jobs]]\nid = "php-artisan"' in done.stdout
    assert '# nightly cleanup\n[[jobs]]\nid = "php-cleanup"' in done.stdout
    assert "line 8: 'root' looks like the user field of a system crontab" in done.stderr
    system = tmp_path / "cron.d"
    system.write_text("0 0 * * 0 root /usr/bin/weekly-report\n@daily backup /opt/dump\n")
    done = subprocess.run([*command[:-1], "--system", str(system)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.findall(r'^id = "(.*)"$', done.stdout, re.M) == ["weekly-report", "dump"]
    assert 'command = "/usr/bin/weekly-report"' in done.stdout
    assert "# ran as root (line 1 of a system crontab)" in done.stdout
    assert "# ran as backup (line 2 of a system crontab)" in done.stdout


def test_cron_shorthands_and_a_clear_refusal_of_reboot(tmp_path: Path) -> None:
    from rota.cron import Cron

    assert Cron("@hourly").expression == "0 * * * *"
    assert Cron("@weekly").expression == "0 0 * * 0"
    (tmp_path / "jobs.toml").write_text('[[jobs]]\nid = "r"\ncron = "@reboot"\ncommand = "x"\n')
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(tmp_path / "jobs.toml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'@reboot' has no meaning for a durable schedule" in done.stderr


def test_a_command_runs_in_its_cwd(cli: Cli) -> None:
    where = cli.dir / "work"
    where.mkdir()
    cli.write(job("here", "pwd >> $OUT", f'cwd = "{where}"\n')
              + job("nowhere", "true", f'cwd = "{cli.dir / "missing"}"\n'))  # fmt: skip
    proc = cli.start()
    cli.wait(lambda: ran(cli) == [str(where)] and _history(cli, "nowhere") != [], 60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    [failed] = _history(cli, "nowhere")
    assert failed["result"] == "failed"
    assert "cannot start 'true' in" in failed["error"]


def test_status_and_history_show_times_in_the_jobs_zone_and_when_it_ran(cli: Cli) -> None:
    """``[defaults] tz`` reached ``plan`` only: ``status`` showed UTC, and the slot
    of the last run where a reader looks for when it ran."""
    slot = (datetime.now(UTC) - timedelta(minutes=10)).replace(microsecond=0)  # late
    cli.write(
        '[defaults]\ntz = "Asia/Kolkata"\n\n'  # +05:30 all year
        f'[[jobs]]\nid = "late"\nat = "{slot.isoformat()}"\ncommand = "true"\n'
        f'[[jobs]]\nid = "hourly"\n{EVERY}command = "true"\n'
    )
    proc = cli.start()
    cli.wait(lambda: _history(cli, "late") != [], 30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    rows = {line.split()[0]: line for line in cli("status").stdout.splitlines()[1:]}
    assert "+05:30" in rows["hourly"].split()[2]  # its next run, in its zone
    shown = datetime.fromisoformat(rows["late"].split("(")[1].rstrip(")"))
    assert shown.utcoffset() == timedelta(hours=5, minutes=30)
    assert abs((shown - datetime.now(UTC)).total_seconds()) < 60  # when it ran, not its slot
    [line, *_] = cli("history", "late").stdout.splitlines()
    at, result = line.split()[:2]
    assert datetime.fromisoformat(at) == slot
    assert at.endswith("+05:30")
    assert result == "ok"
    assert "started " in line
    assert "+05:30" in line.split("started ")[1]
    utc = cli("status", "--tz", "UTC").stdout
    assert "+05:30" not in utc
    assert "+00:00" in utc


def _memory(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory figure, in bytes (``VmRSS``, ``VmHWM``: the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def test_a_loud_command_leaves_the_nodes_memory_flat(cli: Cli) -> None:
    """A job printing 400 MB took ``rota run`` to 1,132 MiB to keep a 2,000-character
    tail. Here 40 MB in lines of 1,000 characters, each also logged: the node's peak
    memory stays within 30 MiB of what it was before the job printed."""
    marker = cli.dir / "go"
    command = (
        f"while [ ! -e {marker} ]; do sleep 0.05; done; "
        "head -c 40000000 /dev/zero | tr '\\\\0' x | fold -w 1000; echo; echo last line"
    )
    cli.write(job("loud", command))
    proc = cli.start(log=cli.dir / "node.log")
    cli.wait(lambda: _task(cli, "loud").get("status") == "running", 30)
    before = _memory(proc.pid, "VmRSS")
    marker.touch()
    cli.wait(lambda: _history(cli, "loud") != [], 120)
    peak = _memory(proc.pid, "VmHWM")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    [record] = _history(cli, "loud")
    assert record["result"] == "ok"
    assert record["output"].rstrip().endswith("last line")
    assert len(record["output"]) <= 2000 + len("...")  # the tail, its cut marked
    assert peak - before < 30 * 2**20, (before / 2**20, peak / 2**20)


def test_a_job_removed_from_its_file_finishes_its_run_in_flight(cli: Cli) -> None:
    """SIGHUP with a job gone from the file: its command, running, is not ended (it
    was: the node took the removal for a cancel), and it is no longer listed."""
    slow = '[[jobs]]\nid = "slow"\nevery = "1h"\nstart = "2020-01-01T00:00:00Z"\n'
    slow += 'misfire = "coalesce"\ncommand = "echo started >> $OUT; sleep 2; echo done >> $OUT"\n'
    cli.write(slow + job("keep"))
    proc = cli.start()
    cli.wait(lambda: "started" in cli.lines(), 30)
    cli.write(job("keep"))
    proc.send_signal(signal.SIGHUP)
    cli.wait(lambda: "done" in cli.lines(), 30)
    [run] = cli.json("history", "slow")
    assert run["result"] == "ok"
    assert "slow" not in [task["id"] for task in cli.json("status")]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
