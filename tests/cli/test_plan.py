"""``rota plan`` against hand-worked cases (DST included), and bad job files."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date, time
from pathlib import Path
from typing import Any

import pytest

from rota.calendars import BusinessDay
from rota.cli import main
from rota.cli._jobfile import load


def plan(tmp_path: Path, text: str, *args: str) -> list[dict[str, Any]]:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs), "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def times(runs: list[dict[str, Any]]) -> list[str]:
    return [r["time"] for r in runs]


def test_an_interval_runs_one_period_after_loading(tmp_path: Path) -> None:
    job = '[[jobs]]\nid = "s"\nevery = "15m"\ncommand = "true"\n'
    window = ["--from", "2026-06-01T12:00:00+00:00", "--until", "+1h", "--tz", "UTC"]
    runs = plan(tmp_path, job, *window)
    assert times(runs) == [
        "2026-06-01T12:15:00+00:00",
        "2026-06-01T12:30:00+00:00",
        "2026-06-01T12:45:00+00:00",
        "2026-06-01T13:00:00+00:00",
    ]
    assert runs[0] == {"job": "s", "at": 1780316100.0, "time": "2026-06-01T12:15:00+00:00"}


def test_cron_across_the_2026_spring_change_in_berlin(tmp_path: Path) -> None:
    """02:30 does not exist on 29 March 2026 in Berlin: that run is at 03:00 CEST."""
    job = '[[jobs]]\nid = "n"\ncron = "30 2 * * *"\ntz = "Europe/Berlin"\ncommand = "true"\n'
    runs = plan(tmp_path, job, "--from", "2026-03-28T00:00:00+01:00", "--until", "+3d")
    assert times(runs) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_cron_across_the_2026_autumn_change_in_berlin(tmp_path: Path) -> None:
    """02:30 happens twice on 25 October 2026: it runs once, the first time (CEST)."""
    job = '[[jobs]]\nid = "n"\ncron = "30 2 * * *"\ntz = "Europe/Berlin"\ncommand = "true"\n'
    runs = plan(tmp_path, job, "--from", "2026-10-24T12:00:00+02:00", "--until", "+2d")
    assert times(runs) == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_hourly_cron_across_both_2026_changes_in_new_york(tmp_path: Path) -> None:
    job = '[[jobs]]\nid = "h"\ncron = "0 * * * *"\ntz = "America/New_York"\ncommand = "true"\n'
    spring = plan(tmp_path, job, "--from", "2026-03-08T00:30:00-05:00", "--until", "+3h")
    assert times(spring) == [  # 02:00 does not exist: 01:00 EST, then 03:00 EDT
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T04:00:00-04:00",
    ]
    autumn = plan(tmp_path, job, "--from", "2026-11-01T00:30:00-04:00", "--until", "+3h")
    assert times(autumn) == [  # 01:00 happens twice: it runs once, at 01:00 EDT
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T02:00:00-05:00",
    ]


def test_an_at_in_the_past_runs_at_once_and_an_empty_window_is_empty(tmp_path: Path) -> None:
    job = '[[jobs]]\nid = "o"\nat = "2026-01-01T00:00:00+00:00"\ncommand = "true"\n'
    runs = plan(tmp_path, job, "--from", "2026-06-01T00:00:00+00:00", "--until", "+1h")
    assert runs == [{"job": "o", "at": 1767225600.0, "time": "2026-01-01T00:00:00+00:00"}]
    later = '[[jobs]]\nid = "o"\nat = "2027-01-01T00:00:00+00:00"\ncommand = "true"\n'
    assert plan(tmp_path, later, "--from", "2026-06-01T00:00:00+00:00", "--until", "+1h") == []


def test_several_jobs_interleave_in_run_order(tmp_path: Path) -> None:
    text = (
        '[defaults]\ntz = "UTC"\n'
        '[[jobs]]\nid = "a"\nevery = "20m"\ncommand = "true"\n'
        '[[jobs]]\nid = "b"\ncron = "*/30 * * * *"\ncommand = "true"\n'
    )
    runs = plan(tmp_path, text, "--from", "2026-06-01T12:00:00+00:00", "--until", "+1h")
    assert [(r["job"], r["time"][11:16]) for r in runs] == [
        ("a", "12:20"), ("b", "12:30"), ("a", "12:40"), ("b", "13:00"), ("a", "13:00"),
    ]  # fmt: skip


X = '[[jobs]]\nid = "x"\n'
EVERY = 'every = "5m"\n'
TRUE = 'command = "true"\n'
BAD = [
    (X + EVERY + TRUE + "colour = 1\n", "job 'x': unknown keys ['colour']"),
    (X + 'every = "5 minutes"\n' + TRUE, "job 'x': key 'every': '5 minutes' is not a duration"),
    (X + 'cron = "61 * * * *"\n' + TRUE, "job 'x': key 'cron': expression '61 * * * *' is not"),
    (X + 'cron = "0 * * * *"\ntz = "Mars/Olympus"\n' + TRUE,
     "job 'x': key 'tz': unknown time zone 'Mars/Olympus'"),
    (X + EVERY + 'call = "no.such.module:f"\n',
     "job 'x': key 'call': cannot import 'no.such.module:f'"),
    (X + EVERY + 'cron = "* * * * *"\n' + TRUE, "job 'x': give exactly one of 'cron', 'every'"),
    (X + EVERY, "job 'x': give exactly one of 'command', 'call'"),
    (X + 'at = "tomorrow"\n' + TRUE, "job 'x': key 'at': 'tomorrow' is not an ISO 8601 time"),
    (X + EVERY + TRUE + 'misfire = "sometimes"\n', "job 'x': key 'misfire': 'sometimes' is not"),
    (X + EVERY + TRUE + X + EVERY + TRUE, "job 'x': key 'id': used twice"),
    (X + EVERY + 'call = "json:dumps"\nargs = [1, 2, 3, 4]\n', "job 'x': key 'call': action"),
    ("[[jobs\n", "not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_job_files_exit_2_naming_file_job_and_key_and_store_nothing(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(text)
    store = tmp_path / "state.db"
    for command in (["plan", str(jobs)], ["run", str(jobs), "--store", f"sqlite:///{store}"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{jobs}: " in err
        assert message in err
    assert not store.exists()  # nothing ran, nothing was stored


def test_bad_windows_and_urls_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nid = "x"\nevery = "5m"\ncommand = "true"\n')
    assert main(["plan", str(jobs), "--until", "+forever"]) == 2
    assert "--until: 'forever' is not a duration" in capsys.readouterr().err
    assert main(["status", "--store", "mysql://db"]) == 2
    assert "store URL 'mysql://db' is not one of" in capsys.readouterr().err


def test_the_scheduling_controls_in_a_plan(tmp_path: Path) -> None:
    """``jitter`` lists each slot with its start; ``max_runs`` and ``end`` end a job."""
    from rota.schedules import jitter_offset

    job = (
        '[[jobs]]\nid = "j"\nevery = "1h"\nstart = "2026-06-01T00:00:00+00:00"\n'
        'command = "true"\njitter = "10m"\nmax_runs = 2\n'
        '[[jobs]]\nid = "e"\nevery = "1h"\nstart = "2026-06-01T00:00:00+00:00"\n'
        'command = "true"\nend = "2026-06-01T01:30:00+00:00"\n'
    )
    runs = plan(tmp_path, job, "--from", "2026-06-01T00:00:00+00:00", "--until", "+5h")
    jittered = [r for r in runs if r["job"] == "j"]
    assert [r["time"] for r in jittered] == [
        "2026-06-01T00:00:00+00:00",
        "2026-06-01T01:00:00+00:00",
    ]
    for run in jittered:
        assert run["starts"] == run["at"] + jitter_offset("j", run["at"], 600)
    assert [r["time"] for r in runs if r["job"] == "e"] == [
        "2026-06-01T00:00:00+00:00", "2026-06-01T01:00:00+00:00",
    ]  # fmt: skip
    assert all("starts" not in r for r in runs if r["job"] == "e")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('overlap = "sometimes"', "key 'overlap': 'sometimes' is not one of buffer, skip"),
        ("overlap = { allow = 0 }", "key 'overlap': allow = 0 is not an int >= 1"),
        ('deadline = "soon"', "key 'deadline': 'soon' is not a duration"),
        ('jitter = "-1s"', "key 'jitter'"),
        ("max_runs = 0", "key 'max_runs': 0 is not an int >= 1"),
        ('end = "tomorrow"', "key 'end': 'tomorrow' is not an ISO 8601 time"),
    ],
)
def test_bad_control_keys_are_refused_with_the_key_named(
    tmp_path: Path, keys: str, message: str
) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[jobs]]\nid = "x"\nevery = "1h"\ncommand = "true"\n{keys}\n')
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr


def test_replace_is_for_command_jobs_whose_process_group_can_be_ended(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nid = "x"\nevery = "1h"\ncall = "os:getcwd"\noverlap = "replace"\n')
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "key 'overlap': 'replace' stops the run in flight" in done.stderr
    assert "not a 'call' job's" in done.stderr
    jobs.write_text('[[jobs]]\nid = "x"\nevery = "1h"\ncommand = "true"\noverlap = "replace"\n')
    assert subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs)],
        capture_output=True, text=True, timeout=60, check=False,
    ).returncode == 0  # fmt: skip


def test_a_one_off_job_has_no_recurring_controls(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[defaults]\nmax_runs = 3\n[[jobs]]\nid = "x"\nat = "2030-01-01T00:00:00+00:00"\n'
        'command = "true"\ndeadline = "5m"\n[[jobs]]\nid = "y"\nat = "2030-01-01T00:00:00+00:00"\n'
        'command = "true"\noverlap = "skip"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2  # the default max_runs is left out for x; y's own overlap is not
    assert "job 'y': key 'overlap': a one-off ('at') job has no slots" in done.stderr


NYSE = """
[calendars.nyse]
tz = "America/New_York"
dates = ["2026-12-25", "2027-01-01"]
exclude = [["22:00", "06:00"], ["2026-12-20", "2027-01-04"]]
"""


def test_business_days_and_cron_lists_in_a_plan(tmp_path: Path) -> None:
    """``business_day`` on a ``[calendars.NAME]`` table, in its zone; ``cron`` as a list
    is the union of its expressions."""
    text = (
        NYSE
        + """
[[jobs]]
id = "month-end"
business_day = -1
at = "17:00"
calendar = "nyse"
command = "true"

[[jobs]]
id = "twice"
cron = ["0 9 * * *", "0 15 * * *"]
tz = "UTC"
command = "true"
"""
    )
    window = ["--from", "2026-11-30T12:00:00+00:00", "--until", "+62d", "--tz", "UTC"]
    runs = plan(tmp_path, text, *window)
    month_end = times([r for r in runs if r["job"] == "month-end"])
    # 30 Nov (a Monday), 31 Dec (the 25th and 1 Jan are holidays, not the 31st), 29 Jan
    assert month_end == [
        "2026-11-30T22:00:00+00:00", "2026-12-31T22:00:00+00:00", "2027-01-29T22:00:00+00:00",
    ]  # fmt: skip
    twice = times([r for r in runs if r["job"] == "twice"])
    assert twice[:3] == [
        "2026-11-30T15:00:00+00:00", "2026-12-01T09:00:00+00:00", "2026-12-01T15:00:00+00:00",
    ]  # fmt: skip
    assert len(twice) == 1 + 2 * 61 + 1  # 30 Nov 15:00, 61 days twice, 31 Jan 09:00


def test_a_business_day_job_loads_with_its_calendar_and_zone(tmp_path: Path) -> None:
    """What ``rota run`` stores: the schedule with its calendar (as data, see
    tests/test_calendars.py), shown in the calendar's zone."""
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        NYSE + '[[jobs]]\nid = "first"\nbusiness_day = 1\ncalendar = "nyse"\ncommand = "true"\n'
    )
    (job,) = load(jobs)
    assert isinstance(job.when, BusinessDay)
    assert (job.when.n, job.when.at) == (1, time(9, 0))
    assert job.when.calendar.holidays == {date(2026, 12, 25), date(2027, 1, 1)}
    assert job.zone_name == "America/New_York"
    assert job.when.spec()["calendar"] == job.when.calendar.to_json()


CAL = "[calendars.c]\n"
BAD_CALENDARS = [
    (X + "business_day = 1\n" + TRUE, "job 'x': key 'business_day': needs a 'calendar'"),
    (X + 'business_day = 1\ncalendar = "nyse"\n' + TRUE,
     "job 'x': key 'calendar': 'nyse' is not a [calendars.NAME] of this file"),
    (CAL + X + 'business_day = 0\ncalendar = "c"\n' + TRUE,
     "job 'x': key 'business_day': n must be 1 to 23 or -1 to -23, got 0"),
    (CAL + X + 'business_day = 1\nat = "5pm"\ncalendar = "c"\n' + TRUE,
     "job 'x': key 'at': '5pm' is not a time of day"),
    (CAL + X + EVERY + 'on_excluded = "next"\n' + TRUE,
     "job 'x': key 'on_excluded': needs a 'calendar' to apply to"),
    (CAL + X + EVERY + 'calendar = "c"\non_excluded = "later"\n' + TRUE,
     "job 'x': key 'on_excluded': 'later' is not one of skip, next, previous"),
    (CAL + X + 'at = "2030-01-05T09:00:00+00:00"\ncalendar = "c"\non_excluded = "skip"\n' + TRUE,
     "job 'x': key 'on_excluded': a one-off task takes calendar= only with"),
    (CAL + 'weekends = []\nexclude = [["20:00", "23:00"]]\n' + X + 'cron = "0 21 * * *"\n'
     'calendar = "c"\n' + TRUE, "job 'x': key 'calendar': calendar 'c' excludes every slot"),
    (CAL + 'holidays = "ZZ"\n' + X + EVERY + TRUE,
     "calendar 'c': key 'holidays': the holidays package knows no country 'ZZ'"),
    (CAL + 'dates = ["2026-13-01"]\n' + X + EVERY + TRUE,
     "calendar 'c': key 'dates': '2026-13-01' is not a date"),
    (CAL + 'exclude = [["22:00", "22:00"]]\n' + X + EVERY + TRUE,
     "calendar 'c': key 'exclude': a window must not be empty"),
    (CAL + 'weekends = ["caturday"]\n' + X + EVERY + TRUE, "calendar 'c': key 'weekends'"),
    (CAL + 'colour = "red"\n' + X + EVERY + TRUE, "calendar 'c': unknown keys ['colour']"),
    (X + 'cron = []\n' + TRUE, "job 'x': key 'cron': [] is not a cron expression string"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD_CALENDARS)
def test_bad_calendars_exit_2_naming_file_calendar_or_job_and_key(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    test_bad_job_files_exit_2_naming_file_job_and_key_and_store_nothing(
        tmp_path, text, message, capsys
    )


def test_a_plan_shows_what_the_calendar_moved_and_excluded(tmp_path: Path) -> None:
    """``calendar`` and ``on_excluded`` on cron jobs: moved runs keep their slot
    (``moved_from``), merged slots are listed with their run, excluded ones say why."""
    text = (
        NYSE.replace('["2026-12-20", "2027-01-04"]', '["2026-12-31", "2027-01-01"]')
        + """
[[jobs]]
id = "pay"
cron = "0 9 26 * *"
tz = "America/New_York"
calendar = "nyse"
on_excluded = "next"
command = "true"

[[jobs]]
id = "late"
cron = "0 23 * * 1-5"
tz = "America/New_York"
calendar = "nyse"
on_excluded = "previous"
command = "true"

[[jobs]]
id = "daily"
cron = "0 9 * * *"
tz = "America/New_York"
calendar = "nyse"
command = "true"
"""
    )
    window = ["--from", "2026-12-24T00:00:00-05:00", "--until", "2026-12-29T00:00:00-05:00"]
    runs = plan(tmp_path, text, *window)
    pay = [r for r in runs if r["job"] == "pay"]
    assert pay == [{"job": "pay", "at": 1798466400, "time": "2026-12-28T09:00:00-05:00",
                    "moved_from": 1798293600}]  # fmt: skip
    late = [r for r in runs if r["job"] == "late"]
    # Thursday 23:00 goes to the window's start, 22:00; so does Friday's (a holiday:
    # Thursday 23:00, in the window): one run at one instant, the later slot's key
    assert [(r["time"], r.get("moved_from"), r.get("merged")) for r in late] == [
        ("2026-12-24T22:00:00-05:00", 1798257600, [1798171200]),
        ("2026-12-28T22:00:00-05:00", 1798516800, None),
    ]
    daily = [(r["time"], r.get("excluded")) for r in runs if r["job"] == "daily"]
    assert daily == [
        ("2026-12-24T09:00:00-05:00", None),
        ("2026-12-25T09:00:00-05:00", "holiday"),
        ("2026-12-26T09:00:00-05:00", "weekend"),
        ("2026-12-27T09:00:00-05:00", "weekend"),
        ("2026-12-28T09:00:00-05:00", None),
    ]
    # a window that ends before the run after the excluded slots lists them too
    shorter = [window[0], window[1], "--until", "2026-12-27T12:00:00-05:00"]
    daily_short = [
        r.get("excluded") for r in plan(tmp_path, text, *shorter) if r["job"] == "daily"
    ]
    assert daily_short == [None, "holiday", "weekend", "weekend"]
    jobs = tmp_path / "jobs.toml"
    done = subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(jobs), *window],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "2026-12-28T09:00:00-05:00  pay\n  moved from Sat 2026-12-26 09:00 (weekend)\n" in (
        done.stdout
    )
    assert "2026-12-25T09:00:00-05:00  daily  excluded: holiday\n" in done.stdout
