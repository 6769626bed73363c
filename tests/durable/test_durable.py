"""DurableScheduler through its public API, on a MemoryStore and a real SQLite file."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import itertools
import logging
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rota import (
    AsyncRunner,
    DurableScheduler,
    FixedDelay,
    FixedRate,
    ManualClock,
    Misfire,
    Once,
    Overlap,
    Result,
    RunContext,
    Runner,
    Scheduler,
    Status,
)
from rota.cron import Cron
from rota.durable import StoredError, StoredTasks
from rota.durable import _commit as durable_commit
from rota.durable._rows import Held
from rota.store import (
    Change,
    Edit,
    MemoryStore,
    NodeRow,
    SQLiteStore,
    Store,
    StoreError,
    TaskRow,
    open_store,
)
from rota.store._sqlite import _pieces as sqlite_pieces
from tests.durable import jobs
from tests.helpers import Collector, make_store, rows, wait_until

NOOP = "tests.durable.jobs:noop"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same store protocol in memory, in a SQLite file, on a PostgreSQL server."""
    made = make_store(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000)


@pytest.fixture
def sched(store: Store, clock: ManualClock) -> DurableScheduler:
    return DurableScheduler(store, clock=clock)


# -- what is stored: names, paths, JSON -----------------------------------------


def test_actions_are_names_paths_or_module_functions(sched: DurableScheduler) -> None:
    log: list[Any] = []
    sched.register("log", log.append)
    assert sched.schedule_once("a", 1, "log")
    assert sched.schedule_once("b", 2, NOOP)
    assert sched.schedule_once("c", 3, jobs.noop)  # stored as its import path
    assert sched.schedule_once("d", 4, jobs.add, args=[1, 2])
    assert sched.store.get("c").action == NOOP  # type: ignore[union-attr]
    outcomes = sched.tick(1004)
    assert rows(outcomes) == [(t, 1000 + i, "ok", 0) for i, t in enumerate("abcd", 1)]
    assert outcomes[3].value == 3
    assert log == [1001]


def test_lambdas_nested_functions_and_unregistered_names_are_refused(
    sched: DurableScheduler,
) -> None:
    def nested(at: Any) -> None: ...

    with pytest.raises(TypeError, match=r"is a lambda: .*register it"):
        sched.schedule_once("a", 1, lambda at: None)
    with pytest.raises(TypeError, match=r"is a nested function: .*Define it at module level"):
        sched.schedule_once("a", 1, nested)
    with pytest.raises(TypeError, match=r"action 'nope' is not registered"):
        sched.schedule_once("a", 1, "nope")
    with pytest.raises(TypeError, match=r"action 'no.such:thing' cannot be imported"):
        sched.schedule_once("a", 1, "no.such:thing")
    assert sched.status("a") is None


def test_arguments_must_be_json_and_fit_the_call_shape(sched: DurableScheduler) -> None:
    with pytest.raises(TypeError, match=r"args\[1\]\['when'\] is .*datetime.*stored as JSON"):
        sched.schedule_once("a", 1, jobs.add, args=[1, {"when": datetime.now(UTC)}])
    with pytest.raises(TypeError, match=r"kwargs\['x'\] is nan: JSON has no NaN"):
        sched.schedule_once("a", 1, jobs.add, kwargs={"x": float("nan")})
    with pytest.raises(TypeError, match=r"cannot be called with args=\[1\]"):
        sched.schedule_once("a", 1, jobs.add, args=[1])
    with pytest.raises(TypeError, match=r"cannot be called as action\(at\)"):
        sched.schedule_once("a", 1, jobs.add)
    with pytest.raises(TypeError, match=r"task_id must be a str for a durable task, got 3"):
        sched.schedule_once(3, 1, jobs.noop)
    assert sched.tasks() == []


def test_schedules_and_policies_must_be_storable(sched: DurableScheduler) -> None:
    class Mine:
        def start(self, now: Any) -> Any: ...

    with pytest.raises(TypeError, match=r"a schedule a store can keep"):
        sched.schedule("a", Mine(), jobs.noop)

    class Retry:
        def delay(self, retry: int, previous: Any) -> float:
            return 1.0

    with pytest.raises(TypeError, match=r"retry must be Backoff\(...\) or NoRetry\(\)"):
        sched.schedule_once("a", 1, jobs.noop, retry=Retry())

    class LocalError(Exception):
        pass

    with pytest.raises(TypeError, match=r"retry_on must be exception types defined at module"):
        sched.schedule_once("a", 1, jobs.noop, retry_on=LocalError)


def test_a_stored_retry_on_is_matched_by_name_and_never_imported(
    sched: DurableScheduler, clock: ManualClock
) -> None:
    """Whoever can write the store can write ``retry_on``: a path in it is data,
    matched against the raised error's classes by name, never imported (a row naming
    a module ran that module's code on every node that claimed it)."""
    tries: list[int] = []

    def flaky(*, run: RunContext) -> None:
        tries.append(run.attempt)
        raise ConnectionResetError("down")  # a ConnectionError, by its MRO

    sched.register("flaky", flaky)
    sched.schedule_once("x", 0, "flaky", args=[], max_retries=1, retry_on=ConnectionError)

    def plant(row: TaskRow | None) -> Change[None]:
        assert row is not None
        row.spec = {**row.spec, "retry_on": [*row.spec["retry_on"], "tests.planted:Boom"]}
        return Change(None, row=row)

    sched.store.modify("x", plant)
    sched.tick(clock())
    sched.tick(clock() + 60)
    assert "tests.planted" not in sys.modules
    assert tries == [0, 1]  # retried: ConnectionResetError is a ConnectionError
    assert sched.status("x") is Status.FAILED


def test_a_new_sqlite_file_is_private_to_its_owner(tmp_path: Path) -> None:
    """Its rows name the code nodes run and its outcomes hold the jobs' output: new
    files (with -wal and -shm) are 0600 whatever the umask; an existing file's mode
    is left as it is."""
    old = os.umask(0o022)
    try:
        sched = DurableScheduler(SQLiteStore(tmp_path / "new.db"))
        sched.schedule_once("x", 60, NOOP)
        for name in ("new.db", "new.db-wal", "new.db-shm"):
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
        sched.store.close()
        (tmp_path / "shared.db").touch(0o640)
        DurableScheduler(SQLiteStore(tmp_path / "shared.db")).store.close()
        assert (tmp_path / "shared.db").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_a_node_runs_only_the_import_paths_it_declared_or_admits(
    store: Store, clock: ManualClock
) -> None:
    """By default a node claims the import paths this process stored and its
    registered names, nothing else a row names; ``imports`` widens that (a list of
    prefixes, or ``True``); a bad ``imports`` is refused."""
    DurableScheduler(store, clock=clock).schedule_once("t", 0, NOOP)
    assert DurableScheduler(store, clock=clock).tick(clock()) == []  # not declared here
    other = DurableScheduler(store, clock=clock, imports=["tests.other."])
    assert other.tick(clock()) == []
    assert store.get("t") is not None
    assert store.get("t").fence == 0  # type: ignore[union-attr]  # never claimed
    fleet = DurableScheduler(store, clock=clock, imports=["tests.durable."])
    assert [o.task_id for o in fleet.tick(clock())] == ["t"]
    with pytest.raises(TypeError, match="imports must be"):
        DurableScheduler(store, clock=clock, imports="tests.")
    with pytest.raises(ValueError, match="non-empty str prefixes"):
        DurableScheduler(store, clock=clock, imports=[""])


def test_tasks_are_listed_in_one_query_by_pages_with_their_last_outcome(
    store: Store, clock: ManualClock
) -> None:
    """``tasks()`` reads every task with its latest outcome in one query (it was one
    query per task: 113 s for 10^6); ``after``/``limit`` page through by id; the
    latest outcome carries its value, as ``history`` does."""
    sched = DurableScheduler(store, clock=clock)
    sched.register("add", jobs.add)
    for i in range(5):
        sched.schedule_at_fixed_rate(f"t{i}", 0, 10, "add", args=[i, 1])
    sched.schedule_once("gone", 0, "add", args=[0, 0])
    sched.tick(clock())
    sched.tick(clock() + 10)
    asked: list[str] = []
    original = store.outcomes

    def counted(task_id: str, limit: int) -> list[Any]:
        asked.append(task_id)
        return original(task_id, limit)

    store.outcomes = counted  # type: ignore[method-assign]
    listed = sched.tasks()
    assert asked == []  # no query per task
    assert [t.task_id for t in listed] == [f"t{i}" for i in range(5)]  # "gone" is done
    assert all(t.last_outcome is not None for t in listed)
    assert [t.last_outcome.at for t in listed] == [clock() + 10] * 5  # type: ignore[union-attr]
    assert [t.last_outcome.value for t in listed] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    first = sched.tasks(limit=2)
    second = sched.tasks(after=str(first[-1].task_id), limit=2)
    rest = sched.tasks(after=str(second[-1].task_id))
    assert [t.task_id for t in first + second + rest] == [t.task_id for t in listed]
    assert [row.task_id for row, _ in store.page()] == ["gone", "t0", "t1", "t2", "t3", "t4"]
    with pytest.raises(ValueError, match="limit must be >= 1"):
        sched.tasks(limit=0)


def test_completions_committed_together_store_null_where_a_value_is_none(
    tmp_path: Path,
) -> None:
    """The SQLite store binds ``None`` in its hot statements as a NaN (SQLite stores it
    as NULL; ``sqlite3`` binds ``None`` at much greater cost): what is stored is SQL
    NULL, read back as ``None``, and an empty str stays an empty str."""
    path = tmp_path / "s.db"
    clock = ManualClock(1000)
    sched = DurableScheduler(SQLiteStore(path), clock=clock)
    sched.register("empty", lambda at: "")
    sched.schedule("none", Once(at=1000), NOOP)
    sched.schedule("empty", FixedRate(60, start=1000), "empty")
    done = Collector()
    with Runner(sched, on_outcome=done):
        done.wait_for(2)
    db = sqlite3.connect(path)
    try:
        lease = db.execute(
            "SELECT task_id, typeof(owner), typeof(lease_until) FROM rota_tasks ORDER BY task_id"
        ).fetchall()
        recorded = db.execute(
            "SELECT task_id, typeof(error), typeof(value), value, typeof(skipped_by) "
            "FROM rota_outcomes ORDER BY task_id"
        ).fetchall()
    finally:
        db.close()
    assert lease == [("empty", "null", "null"), ("none", "null", "null")]
    assert recorded == [
        ("empty", "null", "text", "", "null"),
        ("none", "null", "null", None, "null"),
    ]
    assert [(h.error, h.value) for h in sched.history("none")] == [(None, None)]
    assert [(h.error, h.value) for h in sched.history("empty")] == [(None, "")]


def test_a_claim_costs_nothing_per_due_row_of_an_action_it_cannot_run(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A shared store's backlog of another service's action (that service is down):
    a node's claim and next_due read only its own actions' ranges of the index.
    Counted in SQLite VM steps, not seconds: flat in those rows (they walked the due
    order past every one of them: 353 ms a claim beside 10^5)."""
    store = SQLiteStore(tmp_path / "s.db")
    sched = DurableScheduler(store, clock=clock)
    other = DurableScheduler(store, clock=clock)
    sched.register("mine", jobs.noop)
    other.register("theirs", jobs.noop)
    for i in range(40):
        sched.schedule_once(f"m{i}", 0, "mine")
    db = store._db()

    def steps() -> int:
        count = 0

        def tick() -> int:
            nonlocal count
            count += 1
            return 0

        db.set_progress_handler(tick, 10)
        try:
            store.next_due(sched.node, sched._actions.known())
            [row] = store.claim(sched.node, clock(), 1, 30, sched._actions.known())
            assert row.action == "mine"
        finally:
            db.set_progress_handler(None, 10)
        return count

    alone = steps()
    with db:  # 5,000 due rows of the other action, older than all of ours
        db.executemany(
            "INSERT INTO rota_tasks (task_id, action, spec, state, status, paused, due, "
            "priority, seq, fence, owner, lease_until, expiries, version) "
            "SELECT ?, 'theirs', spec, state, status, paused, "
            "due - 1000, priority, seq, fence, owner, lease_until, expiries, version "
            "FROM rota_tasks WHERE task_id = 'm39'",
            [(f"t{i}",) for i in range(5_000)],
        )
    beside = steps()
    assert beside < alone * 1.5, (alone, beside)


def test_a_postgresql_password_is_never_shown() -> None:
    """The store's repr (in its errors and logs) shows a password as ``***``, in a URL
    and in keyword/value form (a URL's password was shown as it was)."""
    from rota.store import PostgresStore  # (the postgres extra: a dev dependency)

    for conninfo in ("postgresql://app:s3cretpw@127.0.0.1:1/app",
                     "host=127.0.0.1 password=s3cretpw user=app",
                     "password='s3cret pw' host=127.0.0.1"):  # fmt: skip
        shown = repr(PostgresStore(conninfo))
        assert "s3cret" not in shown
        assert "***" in shown


def test_a_monotonic_clock_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match=r"monotonic.*durable scheduler needs epoch time"):
        DurableScheduler(store, clock=time.monotonic)


def test_the_run_context_carries_fence_and_key(sched: DurableScheduler) -> None:
    seen: list[RunContext] = []

    def record(*, run: RunContext) -> None:
        seen.append(run)

    sched.register("record", record)
    sched.schedule_at_fixed_rate("r", 0, 10, "record", args=[])
    sched.tick(1010)
    assert [(c.key, c.attempt, c.expiries) for c in seen] == [
        ("r@1000", 0, 0),
        ("r@1010", 0, 0),
    ]
    assert seen[0].fence < seen[1].fence


# -- durability ---------------------------------------------------------------


def test_tasks_survive_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "r.db"
    first = DurableScheduler(SQLiteStore(path), clock=clock, imports=True)
    first.schedule_at_fixed_rate("r", 10, 10, NOOP, max_retries=2)
    first.schedule("c", Cron("*/5 * * * *"), NOOP, misfire=Misfire.COALESCE)
    first.store.close()
    again = DurableScheduler(SQLiteStore(path), clock=clock, imports=True)
    assert again.status("r") is Status.SCHEDULED
    assert again.next_run_time("r") == 1010
    assert rows(again.tick(1030)) == [
        ("r", 1010, "ok", 0),
        ("r", 1020, "ok", 0),
        ("r", 1030, "ok", 0),
    ]
    info = again.info("c")
    assert info is not None
    assert repr(info.schedule) == "Cron('*/5 * * * *', tz='UTC')"


@pytest.mark.parametrize(
    ("misfire", "runs", "skipped"),
    [(None, 10, 0), (Misfire.COALESCE, 1, 9), (Misfire.SKIP, 0, 10), (Misfire.bounded(3), 3, 7)],
)
def test_downtime_meets_the_misfire_policy_once(
    tmp_path: Path, misfire: Misfire | None, runs: int, skipped: int
) -> None:
    clock = ManualClock(0)
    path = tmp_path / "m.db"
    DurableScheduler(SQLiteStore(path), clock=clock, imports=True).schedule_at_fixed_rate(
        "r", 10, 10, NOOP, misfire=misfire
    )
    clock.set(105)  # "down" for ten periods: slots 10..100 missed
    nodes = [DurableScheduler(SQLiteStore(path), clock=clock, imports=True) for _ in range(3)]
    outcomes = [o for node in nodes for o in node.tick(105)]
    assert len(outcomes) == runs
    assert sum(o.skipped for o in outcomes) == (skipped if runs else 0)
    if not runs:  # SKIP: the count comes with the next run
        [after] = nodes[0].tick(110)
        assert (after.at, after.skipped) == (110, skipped)
    assert nodes[1].next_run_time("r") == 110 if runs else 120


def test_retries_backoff_and_failure_are_the_engines(sched: DurableScheduler) -> None:
    sched.register("boom", _boom)
    sched.schedule_once("a", 0, "boom", max_retries=2)
    assert rows(sched.tick(1003)) == [("a", 1000, "retry", 0), ("a", 1001, "retry", 1),
                                      ("a", 1003, "failed", 2)]  # fmt: skip
    assert sched.status("a") is Status.FAILED
    [last, *_] = sched.history("a")
    assert (last.slot, last.attempt, last.result, last.error) == (
        1000,
        2,
        "failed",
        "ValueError: boom",
    )
    info = sched.info("a")
    assert info is not None
    assert info.last_outcome is None  # finished: only its status, as in memory
    sched.schedule("b", FixedRate(10), "boom")
    sched.tick(1003)
    info = sched.info("b")
    assert info is not None
    assert isinstance(info.last_outcome.error, StoredError)  # type: ignore[union-attr]


def _boom(at: Any) -> None:
    raise ValueError("boom")


# -- control from another process (another scheduler on the same store) ----------


def test_pause_resume_cancel_and_trigger_from_another_scheduler(store: Store) -> None:
    clock = ManualClock(0)
    node, control = DurableScheduler(store, clock=clock), DurableScheduler(store, clock=clock)
    node.schedule_at_fixed_rate("r", 10, 10, NOOP)
    assert control.pause("r")
    assert control.is_paused("r")
    assert node.is_paused("r")
    assert node.tick(30) == []
    assert control.resume("r")
    assert [o.at for o in node.tick(30)] == [10, 20, 30]
    clock.set(31)
    assert control.trigger("r")
    assert [o.at for o in node.tick(31)] == [31]  # the triggered run, at "now"
    assert node.next_run_time("r") == 40  # the schedule goes on where it was
    assert control.cancel("r")
    assert node.status("r") is Status.CANCELLED
    assert node.tick(100) == []
    assert [control.trigger("r"), control.pause("r"), control.cancel("r")] == [False] * 3


def test_each_accepted_trigger_is_a_run_of_its_own(store: Store) -> None:
    """Three triggers before a node claims, one of them while a slot is due: three
    extra runs, then the due slot, then the schedule as it was (they were merged, and
    every trigger answered True)."""
    clock = ManualClock(0)
    node, control = DurableScheduler(store, clock=clock), DurableScheduler(store, clock=clock)
    node.schedule_at_fixed_rate("r", 10, 10, NOOP)
    clock.set(5)
    assert control.trigger("r")
    clock.set(10)  # the slot at 10 is due now
    assert control.trigger("r")
    clock.set(11)
    assert control.trigger("r")
    ran = [o.at for o in node.tick(11)]
    assert sorted(ran) == [5, 10, 10, 11]  # three triggered runs and the slot at 10
    assert node.next_run_time("r") == 20


def test_ensure_is_idempotent_and_updates_a_changed_declaration(store: Store) -> None:
    clock = ManualClock(0)
    workers = [DurableScheduler(store, clock=clock) for _ in range(4)]
    rate = FixedRate(10, delay=10)
    assert [w.ensure("job", rate, NOOP) for w in workers] == [True, False, False, False]
    assert [o.at for o in workers[0].tick(20)] == [10, 20]
    clock.set(25)
    assert not workers[1].ensure("job", rate, NOOP)  # a restart keeps the cursor
    assert workers[2].next_run_time("job") == 30
    assert workers[3].ensure("job", FixedDelay(7, initial_delay=7), NOOP)  # a new one takes over
    assert workers[0].next_run_time("job") == 32
    workers[0].cancel("job")
    assert not workers[1].ensure("job", rate, NOOP)  # cancelled stays cancelled
    assert len(store.rows()) == 1


def test_unknown_actions_are_left_for_a_node_that_knows_them(store: Store) -> None:
    clock = ManualClock(0)
    knows, other = DurableScheduler(store, clock=clock), DurableScheduler(store, clock=clock)
    knows.register("mine", jobs.noop)
    knows.schedule_once("a", 0, "mine")
    assert other.tick(5) == []
    assert other.status("a") is Status.SCHEDULED
    assert rows(knows.tick(5)) == [("a", 0, "ok", 0)]


def test_a_runner_warns_of_actions_it_does_not_know(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "u.db"
    other = DurableScheduler(SQLiteStore(path))
    other.register("elsewhere", jobs.noop)
    other.schedule_once("a", 3600, "elsewhere")
    sched = DurableScheduler(SQLiteStore(path), poll=0.01)
    with Runner(sched):
        deadline = time.monotonic() + 5
        while "'elsewhere' is not registered here" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert sched.status("a") is Status.SCHEDULED


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_stopped_runners_leave_no_connection_behind(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Each runner's heartbeat, committer and action-listing threads connect to the
    store; when the runner stops they close those connections again."""
    connections: Callable[[], int]
    if kind == "sqlite":
        path = str(tmp_path / "r.db")
        store: Store = SQLiteStore(path)

        def connections() -> int:  # descriptors of the database file in this process
            fds = os.listdir("/proc/self/fd")
            return sum(1 for fd in fds if _points_to(f"/proc/self/fd/{fd}", path))
    else:
        import psycopg

        from rota.store import PostgresStore

        dsn, prefix = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_prefix")
        store = PostgresStore(f"{dsn} application_name={prefix}", prefix=prefix)

        def connections() -> int:  # the server's count of this store's connections
            with psycopg.connect(dsn) as db:
                found = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (prefix,),
                ).fetchone()
            assert found is not None
            return int(found[0])

    sched = DurableScheduler(store, poll=0.01)
    sched.schedule_once("first", 0, NOOP)  # this thread's connection: kept
    expected = 0 if kind == "sqlite" else connections()
    for i in range(4):
        sched.schedule_once(f"t{i}", 0, NOOP)
        done = Collector()
        with Runner(sched, on_outcome=done):
            done.wait_for(1)
        wait_until(lambda: not [t for t in threading.enumerate() if "rota" in t.name], 5)
        if kind == "sqlite":
            # SQLite keeps a closed connection's descriptor while another connection of
            # the process has the file open (for reuse): once this thread's is closed
            # too, any descriptor left is a connection still open
            store.release()
        # A closed connection leaves pg_stat_activity when its server process exits, a
        # moment after the client closed it (later on a loaded host); one left open never.
        wait_until(lambda: connections() == expected, 10)
    store.close()


def _points_to(link: str, path: str) -> bool:
    try:
        return os.readlink(link) == path
    except OSError:  # closed meanwhile
        return False


def test_a_write_waits_out_another_process_holding_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SQLite's busy timeout a write keeps trying (no "database is locked" for
    the user), up to ``LOCKED_RETRY`` seconds; then the error, and nothing written."""
    import rota.store._sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT", 0.05)
    path = tmp_path / "b.db"
    sched = DurableScheduler(SQLiteStore(path))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)  # another writer

    def hold(seconds: float) -> threading.Thread:
        other.execute("BEGIN IMMEDIATE")
        thread = threading.Timer(seconds, lambda: other.execute("COMMIT"))
        thread.start()
        return thread

    holder = hold(0.5)
    started = time.monotonic()
    assert sched.schedule_once("a", 0, NOOP)
    assert time.monotonic() - started >= 0.4
    holder.join()
    monkeypatch.setattr(sqlite_store, "LOCKED_RETRY", 0.2)
    holder = hold(1.0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sched.schedule_once("b", 0, NOOP)
    holder.join()
    assert sched.status("b") is None
    assert sched.status("a") is Status.SCHEDULED


def test_opening_a_new_file_another_process_is_writing_waits_for_it(tmp_path: Path) -> None:
    """Two processes starting on a new file at once (``rota run`` twice): turning the
    file to WAL needs it alone, and SQLite reports the other's write transaction at
    once there, busy timeout or not. Opening waits for it instead of failing."""
    path = tmp_path / "new.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (x)")  # the file, still in rollback-journal mode
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")
    holder = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    holder.start()
    started = time.monotonic()
    store = SQLiteStore(path)
    store.open()
    assert time.monotonic() - started >= 0.2
    holder.join()
    assert DurableScheduler(store).schedule_once("a", 0, NOOP)
    store.close()
    other.close()


class SlowListingStore(SQLiteStore):
    """Listing the stored actions takes 2 s (a store of many millions of tasks)."""

    def actions(self) -> set[str]:
        time.sleep(2)
        return super().actions()


def test_listing_the_stored_actions_delays_no_heartbeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sched = DurableScheduler(SlowListingStore(tmp_path / "l.db"), lease=0.3, poll=0.01)
    sched.register("slow", _slow)  # 0.3 s: one lease, renewed twice meanwhile
    sched.schedule_once("a", 0, "slow")
    done = Collector()
    with Runner(sched, on_outcome=done):
        done.wait_for(1)
    assert "lease" not in caplog.text
    assert [o.task_id for o in sched.history("a")] == ["a"]  # its completion was recorded


class ListingAfterCloseStore(SQLiteStore):
    """Listing the stored actions ends after the store was closed (a runner stopped,
    and its scheduler's store closed, while a slow listing ran)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.listed = threading.Event()

    def actions(self) -> set[str]:
        db = self._db()  # the listing's connection, opened before the store is closed
        time.sleep(0.3)
        try:
            db.execute("SELECT 1")  # its scan goes on: "Cannot operate on a closed database"
            return super().actions()
        finally:
            self.listed.set()


def test_a_runner_stopped_during_its_start_up_listing_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It logged "Cannot operate on a closed database" at ERROR."""
    store = ListingAfterCloseStore(tmp_path / "c.db")
    sched = DurableScheduler(store)
    with Runner(sched):
        pass
    store.close()
    assert store.listed.wait(10)
    time.sleep(0.1)  # (the thread logs, if it does, right after)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_an_import_path_that_broke_is_left_untouched_with_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(0)
    s = DurableScheduler(store, clock=clock, imports=True)
    s.schedule_once("a", 0, NOOP)

    def rename(row: Any) -> Any:
        from rota.store import Change

        row.action = "tests.durable.jobs:gone"
        return Change(None, row=row)

    store.modify("a", rename)
    assert s.tick(1) == []
    assert "cannot be imported here" in caplog.text
    assert s.status("a") is Status.SCHEDULED
    assert store.get("a").fence == 1  # type: ignore[union-attr]  # claimed once, released


def test_a_lease_that_keeps_expiring_fails_the_run(store: Store) -> None:
    clock = ManualClock(0)
    dead = [
        DurableScheduler(store, clock=clock, lease=5, max_expiries=2, imports=True)
        for _ in range(3)
    ]
    dead[0].schedule_at_fixed_rate("r", 0, 100, NOOP)
    assert dead[0].table.claim(0) is not None  # claimed, then the holder "dies"
    assert dead[1].table.claim(6) is not None  # taken over (expiry 1), and it dies too
    assert dead[2].table.claim(12) is None  # expiry 2: the run fails instead of a third start
    [last, *_] = dead[2].history("r")
    assert (last.result, last.slot) == ("failed", 0)
    assert last.error == "the lease of task 'r''s run at 0 expired 2 times"  # rota's own: no type
    assert dead[2].next_run_time("r") == 100  # and the schedule goes on


def test_concurrent_runs_share_one_lease_and_are_taken_over_together(store: Store) -> None:
    """Under ``Overlap.allow(2)`` the node holding a task claims its second run itself,
    under the same lease; no other node can claim a run of it meanwhile. When that
    node dies with both in flight, the next node takes the lease over and runs both
    slots again (same slot and key, counted once toward ``max_runs``); the dead
    node's completions are fenced off, and each slot is recorded once."""
    clock = ManualClock(0)
    a = DurableScheduler(store, clock=clock, lease=5, node="a", imports=True)
    b = DurableScheduler(store, clock=clock, lease=5, node="b", imports=True)
    a.schedule("t", FixedRate(1), NOOP, overlap=Overlap.allow(2), max_runs=3)
    first = a.table.claim(1)  # slots 0 and 1 are due
    assert first is not None
    assert b.table.claim(1) is None  # the task is a's while a run of it is in flight
    second = a.table.claim(1)
    assert second is not None
    assert a.table.claim(1) is None  # two in flight: slot 2 waits
    assert (first.entry[0], second.entry[0]) == (0, 1)
    assert store.get("t").owner == "a"  # type: ignore[union-attr]
    again = [b.table.claim(7), b.table.claim(7)]  # a's lease ran out at 6
    assert [run.entry[0] for run in again if run is not None] == [0, 1]
    assert b.table.claim(7) is None  # still two in flight
    late = a.table.complete(first, None, 1, 7)  # a wakes up: fenced off, only reported
    assert late.result is Result.OK
    assert a.history("t") == []
    for run in again:
        assert run is not None
        b.table.complete(run, None, 7, 7)
    third = b.table.claim(7)
    assert third is not None
    assert third.entry[0] == 2
    b.table.complete(third, None, 7, 7)
    assert b.status("t") is Status.DONE  # max_runs: three runs, not five
    assert sorted((o.slot, o.owner) for o in b.history("t")) == [(0, "b"), (1, "b"), (2, "b")]
    assert store.get("t").owner is None  # type: ignore[union-attr]


def test_a_claimed_run_whose_lease_ran_out_before_it_started_is_left_to_a_takeover(
    store: Store,
) -> None:
    """A run claimed ahead of a busy pool whose lease ran out before a worker was free
    (a starved or stalled node) is not started, and its lease is renewed no more: it
    runs out, and the run is taken over, rather than held by a heartbeat forever."""
    clock = ManualClock(0)
    a = DurableScheduler(store, clock=clock, lease=10, node="a", imports=True)
    b = DurableScheduler(store, clock=clock, lease=10, node="b", imports=True)
    a.schedule_once("one", 0, NOOP)
    a.schedule_once("two", 0, NOOP)
    first = a.table.claim(0, queued=True, room=2)  # both claimed: "two" waits for a worker
    assert first is not None
    assert a.table.claim(11, queued=True, room=0) is None  # "two"'s lease ran out at 10
    a._stored._heartbeat(11)
    taken = b.table.claim(12)
    assert isinstance(taken, Held)
    assert (taken.task_id, taken.row.expiries) == ("two", 1)


def test_a_concurrent_task_resumed_elsewhere_goes_on_on_the_node_holding_it(
    store: Store,
) -> None:
    """Only the node holding a concurrent task's lease claims its runs; a change another
    process makes (here: resume) reaches that node by its next heartbeat at the latest."""
    clock = ManualClock(0)
    a = DurableScheduler(store, clock=clock, lease=30, node="a", imports=True)
    b = DurableScheduler(store, clock=clock, lease=30, node="b", imports=True)
    a.schedule("t", FixedRate(10), NOOP, overlap=Overlap.allow(2))
    first = a.table.claim(0)
    assert first is not None
    assert b.pause("t")
    assert a.table.claim(10) is None  # paused: nothing more starts
    assert b.resume("t")
    assert b.table.claim(10) is None  # still a's: its run at 0 is in flight
    a._stored._heartbeat(10)
    second = a.table.claim(10)
    assert second is not None
    assert second.entry[0] == 10  # beside the run at 0, still in flight
    for run in (first, second):
        a.table.complete(run, None, 10, 10)
    assert sorted(o.slot for o in a.history("t")) == [0, 10]


def test_shift_leases_shortens_only_the_leases_past_its_bound(store: Store) -> None:
    """After a step back of the hosts' clocks: leases ending past ``beyond`` are
    shortened by ``by``; the others, and rows not in flight, are left as they are."""
    clock = ManualClock(0)
    sched = DurableScheduler(store, clock=clock, lease=10, imports=True)
    for name in ("early", "late", "idle"):
        sched.schedule_once(name, 0 if name != "idle" else 500, NOOP)
    assert sched.table.claim(0) is not None  # "early": leased until 10
    clock.set(3600)
    assert sched.table.claim(3600) is not None  # "late": leased until 3610 (before the step)
    assert store.shift_leases(1800, 3600) == 1
    rows = {row.task_id: row for row in store.rows()}
    assert rows["late"].lease_until == 10
    assert rows["early"].lease_until == 10
    assert rows["idle"].lease_until is None


def test_a_stale_holder_writes_nothing(store: Store) -> None:
    clock = ManualClock(0)
    a, b = (
        DurableScheduler(store, clock=clock, lease=5, imports=True),
        DurableScheduler(store, clock=clock, imports=True),
    )
    a.schedule_once("x", 0, NOOP, max_retries=3)
    held = a.table.claim(0)
    assert held is not None
    taken = b.table.claim(10)  # a stalled past its lease
    assert taken is not None
    b.table.complete(taken, None, 10, 10)
    a.table.complete(held, ValueError("late"), 1, 11)  # woken up: its completion is fenced off
    assert [(o.result, o.owner) for o in b.history("x")] == [("ok", b.node)]
    assert b.status("x") is Status.DONE


class RefusingCompletions:
    """A store (any) that refuses every completion (a fenced write) while ``refusing``:
    a read-only file, revoked privileges, a failing disk; claims still work."""

    def __init__(self, store: Store) -> None:
        self.store, self.refusing, self.refused = store, False, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _check(self, edits: Any) -> None:
        if self.refusing and any(edit.fence is not None for edit in edits):
            self.refused += 1
            raise StoreError("attempt to write a readonly database")

    def modify_many(self, edits: Any) -> Any:
        self._check(edits)
        return self.store.modify_many(edits)

    def complete_and_claim(self, edits: Any, *args: Any) -> Any:
        self._check(edits)
        return self.store.complete_and_claim(edits, *args)


def test_a_lone_node_runs_again_a_run_whose_completion_it_could_not_record(
    store: Store,
) -> None:
    """One node, its store refusing writes for a moment: the completion it could not
    record leaves the run leased to it; once the lease expires, the same node runs it
    again (same key) and records it. It stayed `running` for good before."""
    faulty = RefusingCompletions(store)
    s = DurableScheduler(faulty, lease=0.5, poll=0.05)
    keys: list[str] = []
    s.register("job", lambda *, run: keys.append(run.key))
    s.schedule_once("x", 0, "job", args=[])
    faulty.refusing = True
    with Runner(s):
        wait_until(lambda: faulty.refused > 0, timeout=10)
        faulty.refusing = False
        wait_until(lambda: s.status("x") is Status.DONE, timeout=10)
    assert len(keys) == 2
    assert keys[0] == keys[1]
    [outcome] = s.history("x")
    assert outcome.result == "ok"


def test_a_run_claimed_by_a_lost_answer_is_not_kept_by_the_heartbeat(store: Store) -> None:
    """A claim committed whose answer never reached the node (a dropped connection):
    the node's heartbeats renew only the runs it knows it holds, so that row's lease
    runs out and another node takes the run over."""
    clock = ManualClock(0)
    a = DurableScheduler(store, clock=clock, lease=10, node="a", imports=True)
    b = DurableScheduler(store, clock=clock, lease=10, node="b", imports=True)
    a.schedule_once("lost", 0, NOOP)
    a.schedule_once("held", 0, NOOP, priority=1)
    store.claim("a", 0, 1, 10, a._actions.known())  # "lost" leased to a: the answer is dropped
    held = a.table.claim(0)
    assert isinstance(held, Held)
    assert held.task_id == "held"
    for now in (4, 8, 12):  # a's heartbeats, every lease / 3, while it runs "held"
        a._stored._heartbeat(now)
    assert not held.lost
    taken = b.table.claim(12)
    assert isinstance(taken, Held)
    assert (taken.task_id, taken.row.expiries) == ("lost", 1)


def _newer(row: TaskRow | None) -> Change[None]:
    """A row as a newer rota might write it: a schedule kind this one does not know."""
    assert row is not None
    row.spec = {**row.spec, "schedule": {**row.spec["schedule"], "kind": "lunar"}}
    return Change(None, row=row)


def test_a_row_this_rota_cannot_read_is_left_as_it_is_and_holds_no_run_back(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A claimed row that cannot be restored (a newer rota wrote it) is logged
    once and left as it is; it fails no claim, so the runs claimed with it run, and
    this node never claims it again, even once its lease has run out."""
    sched = DurableScheduler(store, clock=clock, lease=10)
    sched.schedule_once("bad", 0, NOOP)
    sched.schedule_once("good", 0, NOOP)
    store.modify("bad", _newer)
    spec = store.get("bad").spec  # type: ignore[union-attr]
    assert [o.task_id for o in sched.tick(1000)] == ["good"]
    assert [o.task_id for o in sched.tick(1100)] == []  # its lease ran out at 1010
    assert store.get("bad").spec == spec  # type: ignore[union-attr]
    assert caplog.text.count("this process cannot read its stored row") == 1
    assert "'lunar'" in caplog.text
    listed = {info.task_id: info for info in sched.tasks()}  # still listed, as it is
    assert (listed["bad"].status, listed["bad"].schedule) == (Status.RUNNING, None)


def test_a_row_whose_json_is_corrupt_fails_no_claim_and_wakes_no_runner_in_a_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Corrupt JSON in one row (a disk fault, a hand edit): the runs claimed with it
    still run, the row is left as it is, and a runner does not spin on it."""
    path = tmp_path / "c.db"
    store = CountingClaims(path)
    sched = DurableScheduler(store, lease=0.2, poll=0.05, batch=4)
    sched.schedule_once("bad", 0, NOOP)
    sched.schedule_once("good", 0, NOOP)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rota_tasks SET state = '{not json' WHERE task_id = 'bad'")
    done = Collector()
    with Runner(sched, on_outcome=done):
        assert done.wait_for(1, timeout=10)
        time.sleep(0.5)  # "bad"'s lease runs out meanwhile: it is not claimed again
    assert [str(o.task_id) for o in done.outcomes] == ["good"]
    assert store.claims < 30  # about one per poll, not a busy loop
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT state FROM rota_tasks WHERE task_id = 'bad'").fetchone()
    assert found == ("{not json",)
    assert caplog.text.count("is not valid JSON") == 1
    [listed] = sched.tasks()  # "good" is done; "bad" is still listed
    assert (listed.task_id, listed.schedule, listed.attempt) == ("bad", None, 0)
    assert sched.info("bad") == listed
    assert sched.status("bad") is Status.RUNNING  # (its lease ran out: see above)
    [row] = [row for row in store.rows() if row.task_id == "bad"]
    assert row.unreadable is not None
    assert "not valid JSON" in row.unreadable


class CountingClaims(SQLiteStore):
    """Counts claims."""

    claims = 0

    def claim(self, *args: Any) -> Any:
        self.claims += 1
        return super().claim(*args)

    def complete_and_claim(self, *args: Any) -> Any:
        self.claims += 1
        return super().complete_and_claim(*args)


# -- the store -------------------------------------------------------------------


def test_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    SQLiteStore(path).open()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE rota_meta SET value = 99 WHERE key = 'schema_version'")
    db.close()
    with pytest.raises(StoreError, match=r"schema version 99 is newer than this version of rota"):
        SQLiteStore(path).open()


def test_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert isinstance(open_store("memory:"), MemoryStore)
    store = open_store("sqlite:///rel.db")
    assert isinstance(store, SQLiteStore)
    assert (tmp_path / "rel.db").exists()
    assert isinstance(open_store(f"sqlite:///{tmp_path}/abs.db"), SQLiteStore)
    with pytest.raises(StoreError, match=r"store URL 'mysql://x' is not one of"):
        open_store("mysql://x")


def test_table_prefixes_keep_schedules_apart(tmp_path: Path, clock: ManualClock) -> None:
    a = DurableScheduler(SQLiteStore(tmp_path / "p.db", prefix="a_"), clock=clock)
    b = DurableScheduler(SQLiteStore(tmp_path / "p.db", prefix="b_"), clock=clock)
    a.schedule_once("x", 0, NOOP)
    assert b.status("x") is None
    assert a.status("x") is Status.SCHEDULED


# -- runners drive it as they drive memory --------------------------------------


@pytest.mark.parametrize("pool", [False, True])
def test_the_thread_runner_and_its_pool_drive_a_durable_scheduler(
    tmp_path: Path, pool: bool
) -> None:
    sched = DurableScheduler(SQLiteStore(tmp_path / "t.db"), lease=3)
    done = Collector()
    executor = concurrent.futures.ThreadPoolExecutor(4) if pool else None
    with Runner(sched, executor=executor, on_outcome=done):
        for i in range(20):
            sched.schedule_once(f"t{i}", 0.01 * (i % 5), jobs.add, args=[i, 1])
        assert done.wait_for(20, timeout=10)
    if executor:
        executor.shutdown()
    assert sorted(o.value for o in done.outcomes) == list(range(1, 21))  # type: ignore[type-var]
    assert all(sched.status(f"t{i}") is Status.DONE for i in range(20))


@pytest.mark.parametrize("runner", ["thread", "async"])
def test_a_pool_claims_no_more_runs_than_it_has_free_workers(store: Store, runner: str) -> None:
    """Runs a node's pool could not start soon are left to other nodes: with 2
    busy workers, 4 rows are leased (one pool's worth waits); the other node takes
    the next; finished runs have the runner claim again (no busy loop meanwhile)."""
    gate = threading.Event()
    started: list[str] = []

    def hold(name: str) -> None:
        started.append(name)
        gate.wait(10)

    sched = DurableScheduler(store, batch=16)
    sched.register("hold", hold)
    for i in range(8):
        sched.schedule_once(f"t{i}", 0, "hold", args=[f"t{i}"])
    done = Collector()
    pool = concurrent.futures.ThreadPoolExecutor(2)

    def leased() -> list[str]:
        return sorted(r.task_id for r in store.rows() if r.owner is not None)

    def check() -> None:
        wait_until(lambda: len(started) == 2, timeout=10)
        time.sleep(0.2)  # had it claimed more, they would show
        assert leased() == ["t0", "t1", "t2", "t3"]
        other = DurableScheduler(store, node="other")
        other.register("hold", hold)
        taken = other.table.claim(time.time(), room=1)
        assert taken is not None
        assert taken.task_id == "t4"  # left for another node
        other.table.complete(taken, None, time.time(), time.time())
        gate.set()
        assert done.wait_for(7, timeout=10)

    if runner == "thread":
        with Runner(sched, executor=pool, on_outcome=done):
            check()
    else:

        async def main() -> None:
            async with AsyncRunner(sched, executor=pool, on_outcome=done):
                await asyncio.to_thread(check)

        asyncio.run(main())
    pool.shutdown()
    assert sorted(str(o.task_id) for o in done.outcomes) == [
        "t0", "t1", "t2", "t3", "t5", "t6", "t7"
    ]  # fmt: skip


def test_the_async_runner_drives_a_durable_scheduler(tmp_path: Path) -> None:
    sched = DurableScheduler(SQLiteStore(tmp_path / "a.db"))
    sched.register("later", _later)

    async def main() -> list[Any]:
        done = Collector()
        async with AsyncRunner(sched, on_outcome=done):
            sched.schedule_once("a", 0.01, "later", args=[5])
            for _ in range(200):
                if done.outcomes:
                    break
                await asyncio.sleep(0.02)
        return [o.value for o in done.outcomes]

    assert asyncio.run(main()) == [6]


@pytest.mark.parametrize("pool", [False, True])
def test_the_async_runner_reports_on_the_loop_thread(tmp_path: Path, pool: bool) -> None:
    """Completions are committed on the committer thread (and run on workers, with a
    pool); on_outcome still sees each on the loop's thread, before stop() returns."""
    sched = DurableScheduler(SQLiteStore(tmp_path / "l.db"))
    threads: list[int] = []

    async def main() -> int:
        executor = concurrent.futures.ThreadPoolExecutor(2) if pool else None
        async with AsyncRunner(
            sched, executor=executor, on_outcome=lambda o: threads.append(threading.get_ident())
        ):
            for i in range(10):
                sched.schedule_once(f"t{i}", 0, NOOP)
            for _ in range(200):
                if len(threads) == 10:
                    break
                await asyncio.sleep(0.02)
        if executor:
            executor.shutdown()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert threads == [loop_thread] * 10


async def _later(x: int) -> int:
    await asyncio.sleep(0)
    return x + 1


def test_another_process_write_wakes_a_sleeping_runner(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    sched = DurableScheduler(SQLiteStore(path), poll=0.02, imports=True)
    other = DurableScheduler(SQLiteStore(path), imports=True)
    done = Collector()
    with Runner(sched, on_outcome=done):
        time.sleep(0.05)  # asleep, nothing scheduled
        started = time.time()
        other.schedule_once("x", 0, NOOP)
        assert done.wait_for(1, timeout=5)
    assert done.outcomes[0].started - started < 1.0


def test_stopping_releases_claimed_unstarted_runs(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sched = DurableScheduler(SQLiteStore(path), batch=10)
    sched.register("slow", _slow)
    for i in range(5):
        sched.schedule_once(f"s{i}", 0, "slow")
    runner = Runner(sched)
    runner.start()
    time.sleep(0.1)  # s0 runs; s1..s4 are claimed into this node's batch
    runner.stop()
    statuses = [sched.status(f"s{i}") for i in range(5)]
    assert statuses[0] is Status.DONE
    assert statuses[1:] == [Status.SCHEDULED] * 4  # given back, not left to expire
    assert [r.owner for r in sched.store.rows()][1:] == [None] * 4


def _slow(at: Any) -> None:
    time.sleep(0.3)


def test_once_at_a_past_time_runs_at_once(sched: DurableScheduler) -> None:
    sched.schedule("o", Once(at=10), NOOP)
    assert rows(sched.tick(1000)) == [("o", 10, "ok", 0)]


class FlushNotingStore(SQLiteStore):
    """Notes each transaction that completes runs: how many it holds, on which thread
    (", with a claim" if it claims too); each takes ``delay`` seconds (a slow disk)."""

    def __init__(self, path: Path, delay: float = 0.0) -> None:
        super().__init__(path)
        self.delay = delay
        self.flushes: list[tuple[int, str]] = []

    def _note(self, edits: Any, how: str = "") -> None:
        self.flushes.append((len(edits), threading.current_thread().name + how))
        time.sleep(self.delay)

    def modify_many(self, edits: Any) -> Any:
        if any(edit.fence is not None for edit in edits):
            self._note(edits)
        return super().modify_many(edits)

    def complete_and_claim(self, edits: Any, *claim: Any) -> Any:
        self._note(edits, ", with a claim")
        return super().complete_and_claim(edits, *claim)


def _run_durably(sched: DurableScheduler, n: int, action: str = NOOP) -> list[Any]:
    """Schedule ``n`` runs of ``action`` due now and run them with a Runner: each
    outcome must be in the store by the time it is reported. Returns the outcomes."""
    for i in range(n):
        sched.schedule_once(f"t{i:02}", 0, action)
    durable: list[bool] = []
    done = Collector()

    def check(outcome: Any) -> None:
        durable.append(bool(sched.history(str(outcome.task_id))))
        done(outcome)

    with Runner(sched, on_outcome=check):
        assert done.wait_for(n, timeout=10)
    assert durable == [True] * n
    return done.outcomes


@pytest.mark.parametrize("group", [True, False])
def test_under_load_a_runner_group_commits_and_reports_only_durable_outcomes(
    tmp_path: Path, group: bool
) -> None:
    store = FlushNotingStore(tmp_path / "g.db", delay=0.02)  # runs finish while one commits
    _run_durably(DurableScheduler(store, batch=8, group_commit=group), 24)
    sizes = [size for size, _ in store.flushes]
    assert sum(sizes) == 24
    if group:  # what finished during a commit shares the next; at most a batch waits
        assert max(sizes) == 8
        assert len(sizes) <= 6
    else:
        assert sizes == [1] * 24


def test_a_dispatcher_commits_its_batch_of_completions_itself_before_it_claims_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner without a pool runs its claimed batch, then commits the batch's
    completions on its own thread, in the transaction that claims the next batch: no
    other thread to wake per completion (the committer waits LINGER, here 60 s), one
    commit per batch."""
    monkeypatch.setattr(durable_commit, "LINGER", 60.0)
    store = FlushNotingStore(tmp_path / "d.db")
    _run_durably(DurableScheduler(store, batch=8, poll=5), 24)  # claims of 1, 8, 8, 7
    assert store.flushes == [(n, "rota-runner, with a claim") for n in (1, 8, 8, 7)]


class ClaimNotingStore(SQLiteStore):
    """Notes the ``limit`` of each claim."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.limits: list[int] = []

    def claim(self, node: str, now: Any, limit: int, *rest: Any) -> Any:
        self.limits.append(limit)
        return super().claim(node, now, limit, *rest)

    def complete_and_claim(self, edits: Any, node: str, now: Any, limit: int, *rest: Any) -> Any:
        self.limits.append(limit)
        return super().complete_and_claim(edits, node, now, limit, *rest)


def test_a_runner_without_a_pool_claims_one_run_then_what_it_starts_within_a_poll(
    tmp_path: Path,
) -> None:
    """Fast runs: after a first claim of one, claims of a full batch (their runs start
    well within ``poll``); a claim that was not full does not change the pace."""
    store = ClaimNotingStore(tmp_path / "fast.db")
    _run_durably(DurableScheduler(store, batch=8, poll=5), 24)
    assert store.limits[:5] == [1, 8, 8, 8, 8]  # got 1, 8, 8, 7, then nothing


def test_a_runner_without_a_pool_leaves_slow_runs_to_other_nodes(tmp_path: Path) -> None:
    """Runs that take longer than ``poll`` are claimed one at a time: the others stay
    claimable by other nodes rather than wait in this node's batch."""
    store = ClaimNotingStore(tmp_path / "slow.db")
    sched = DurableScheduler(store, batch=8, poll=0.05)
    sched.register("slow", lambda _at: time.sleep(0.05))
    outcomes = _run_durably(sched, 4, "slow")
    assert store.limits[:4] == [1, 1, 1, 1]
    assert [outcome.error for outcome in outcomes] == [None] * 4


def test_two_nodes_share_slow_runs_due_at_once(tmp_path: Path) -> None:
    """Eight runs of 0.1 s due at once, two nodes: each claims one run at a time, so
    both run some (a node claiming its whole batch would run all eight in turn while
    the other idled)."""
    path = tmp_path / "shared.db"
    nodes = [DurableScheduler(SQLiteStore(path), node=name, poll=0.05) for name in "ab"]
    for sched in nodes:
        sched.register("slow", lambda _at: time.sleep(0.1))
    for i in range(8):
        nodes[0].schedule_once(f"t{i}", 0, "slow")
    done = Collector()
    with Runner(nodes[0], on_outcome=done), Runner(nodes[1], on_outcome=done):
        assert done.wait_for(8, timeout=10)
    owners = [o.owner for i in range(8) for o in nodes[0].history(f"t{i}")]
    assert len(owners) == 8  # each run completed once
    assert owners.count("a") >= 2, owners
    assert owners.count("b") >= 2, owners


def test_completions_keep_waiting_for_the_dispatcher_while_it_keeps_finishing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LINGER counts from the last completion, not the first: a batch of runs that
    each take a while, but less than LINGER, is still committed in one transaction."""
    monkeypatch.setattr(durable_commit, "LINGER", 0.2)
    store = FlushNotingStore(tmp_path / "s.db")
    sched = DurableScheduler(store, batch=12, poll=10)  # claims of 1, then 11
    sched.register("pause", lambda _at: time.sleep(0.02))
    _run_durably(sched, 12, "pause")
    assert store.flushes == [(n, "rota-runner, with a claim") for n in (1, 11)]


def test_a_completion_left_waiting_by_a_long_run_is_committed_after_linger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completion waiting for its dispatcher, which is busy with the next run of
    its batch, is committed (and reported) by the committer thread after LINGER."""
    monkeypatch.setattr(durable_commit, "LINGER", 0.05)
    # claims of the full batch from the first (the pace, measured in time, would make
    # the claims' sizes depend on how loaded the machine is)
    monkeypatch.setattr(StoredTasks, "_paced", lambda self, now: 2)
    store = FlushNotingStore(tmp_path / "l.db")
    sched = DurableScheduler(store, batch=2)
    reported = threading.Event()
    seen: list[bool] = []

    def wait_for_a(*, run: RunContext) -> None:
        if run.task_id == "b":  # "a" ran just before, in the same batch
            seen.append(reported.wait(30))

    sched.register("wait_for_a", wait_for_a)
    for name in ("a", "b"):  # one claim
        sched.schedule_once(name, 0, "wait_for_a", args=())
    done = Collector()

    def note(outcome: Any) -> None:
        if outcome.task_id == "a":
            reported.set()
        done(outcome)

    with Runner(sched, on_outcome=note):
        assert done.wait_for(2, timeout=30)
    assert seen == [True]
    assert store.flushes[0] == (1, "rota-committer")
    assert [sched.status(name) for name in "ab"] == [Status.DONE] * 2


class GatedStore(SQLiteStore):
    """Commits of completions wait until ``gate`` is set (a stalled disk)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()

    def modify_many(self, edits: Any) -> Any:
        if any(edit.fence is not None for edit in edits):
            assert self.gate.wait(10)
        return super().modify_many(edits)


def test_a_worker_runs_its_next_run_while_its_last_completion_commits(tmp_path: Path) -> None:
    """The committer thread commits; the one worker of the pool goes on at once. Outcomes
    are reported only once durable, and ``stop()`` waits for the commits."""
    store = GatedStore(tmp_path / "c.db")
    sched = DurableScheduler(store, batch=4)
    started: list[str] = []

    def note(*, run: RunContext) -> None:
        started.append(str(run.task_id))
        if run.task_id == "a":
            time.sleep(0.2)  # meanwhile "b" is handed to the pool: no run is left to claim

    sched.register("note", note)
    for name in ("a", "b", "c"):
        sched.schedule_once(name, 0, "note", args=())
    done = Collector()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        runner = Runner(sched, executor=pool, on_outcome=done)
        runner.start()
        # "b" ran while "a" waited for its commit; "c" waits: runs waiting for their
        # commits count as in flight, and this pool's claims hold two at most
        wait_until(lambda: started == ["a", "b"], timeout=10)
        assert done.outcomes == []
        assert [sched.status(name) for name in "abc"] == [Status.RUNNING] * 2 + [Status.SCHEDULED]
        store.gate.set()
        done.wait_for(3)
        assert runner.stop(timeout=10)
    assert sorted(str(o.task_id) for o in done.outcomes) == ["a", "b", "c"]
    assert [sched.status(name) for name in "abc"] == [Status.DONE] * 3


def test_a_group_commit_decides_again_only_for_rows_that_changed(
    store: Store, clock: ManualClock
) -> None:
    """One ``modify_many`` (on PostgreSQL: pipelined) of three completions decided in
    advance: one written as decided, one whose row was paused meanwhile (decided again
    from the row: it stays paused), one whose lease was taken over (fenced off)."""
    sched = DurableScheduler(store, clock=clock, lease=100, imports=True)
    short = DurableScheduler(store, clock=clock, lease=5, imports=True)  # a node with short leases
    for name in "abc":
        sched.schedule_at_fixed_rate(name, 0, 10, NOOP)
    held = [node.table.claim(1000.0, room=1) for node in (sched, sched, short)]
    assert [t.task_id for t in held if t is not None] == ["a", "b", "c"]
    edits = [sched._stored._decided(t, None, 1000.0, 1000.0)[0] for t in held if t is not None]
    assert sched.pause("b")  # the row changed: its decision in advance no longer holds
    other = DurableScheduler(store, clock=clock, node="other", lease=5, imports=True)
    taken = other.table.claim(1006.0, room=1)  # c's lease ran out: taken over, fence bumped
    assert taken is not None
    assert taken.task_id == "c"
    a, b, c = store.modify_many(edits)
    assert a is not None
    assert b is not None
    assert c is None
    assert [(o.task_id, o.result) for o in (a.value, b.value)] == [("a", "ok"), ("b", "ok")]
    assert sched.next_run_time("a") == 1010
    assert sched.is_paused("b")
    assert [o.task_id for o in sched.history("c")] == []  # the stale holder wrote nothing
    assert store.get("c").owner == "other"  # type: ignore[union-attr]


def test_a_group_commit_applies_edits_of_one_task_in_their_order(
    store: Store, clock: ManualClock
) -> None:
    """Edits of one task in one ``modify_many`` apply in order: a change before a
    completion decided in advance sees the row as claimed, and the completion then
    decides again from the row that change wrote (the stores write most completions
    in one statement; not those of a task edited twice)."""
    sched = DurableScheduler(store, clock=clock, lease=100)
    for name in "ab":
        sched.schedule_at_fixed_rate(name, 0, 10, NOOP)
    held = [sched.table.claim(1000.0, room=1) for _ in "ab"]
    assert [t.task_id for t in held if t is not None] == ["a", "b"]
    completions = [
        sched._stored._decided(t, None, 1000.0, 1000.0)[0] for t in held if t is not None
    ]
    seen: list[tuple[str, int]] = []

    def look(row: TaskRow | None) -> Change[None]:
        assert row is not None
        seen.append((row.status, row.version))
        row.priority = 7  # a write: the completion decided in advance no longer holds
        return Change(None, row=row)

    version = store.get("a").version  # type: ignore[union-attr]
    a_look, a_done, b_done = store.modify_many([Edit("a", look), completions[0], completions[1]])
    assert seen == [("running", version)]  # before the completion, as sent
    assert a_look is not None
    assert a_done is not None
    assert b_done is not None
    assert [o.result for o in (a_done.value, b_done.value)] == ["ok", "ok"]
    assert (store.get("a").priority, store.get("a").status) == (7, "scheduled")  # type: ignore[union-attr]
    assert sched.next_run_time("a") == sched.next_run_time("b") == 1010


class Unreadable(frozenset[str]):
    """A set of action names that raises when read: a claim that fails midway."""

    def __iter__(self) -> Iterator[str]:
        raise OSError("the claim failed")

    def __contains__(self, name: object) -> bool:
        raise OSError("the claim failed")


def test_complete_and_claim_commits_both_in_one_transaction_or_neither(
    store: Store, clock: ManualClock
) -> None:
    """A batch's completions and the next claim: what ``modify_many`` and ``claim``
    would return; if the claim fails, the completions are not committed either."""
    sched = DurableScheduler(store, clock=clock, lease=100)
    for name in "abcd":
        sched.schedule_once(name, 0, NOOP)
    held = [sched.table.claim(1000.0, room=1) for _ in "ab"]
    edits = [sched._stored._decided(t, None, 1000.0, 1000.0)[0] for t in held if t is not None]
    known = sched._actions.known()
    with pytest.raises(OSError, match="the claim failed"):
        store.complete_and_claim(
            edits, sched.node, 1000.0, 2, 100, known._replace(names=Unreadable())
        )
    assert [sched.status(name) for name in "abcd"] == [Status.RUNNING] * 2 + [Status.SCHEDULED] * 2
    assert sched.history("a") == []

    results, rows = store.complete_and_claim(edits, sched.node, 1000.0, 2, 100, known)
    assert [r.value.result for r in results if r is not None] == ["ok", "ok"]
    assert [row.task_id for row in rows] == ["c", "d"]
    assert [sched.status(name) for name in "abcd"] == [Status.DONE] * 2 + [Status.RUNNING] * 2
    assert [o.result for o in sched.history("a")] == ["ok"]


class NoCombinedStore(MemoryStore):
    """A store whose combined completion-and-claim transaction always fails."""

    def complete_and_claim(self, *args: Any) -> Any:
        raise OSError("the combined transaction failed")


def test_completions_whose_combined_transaction_fails_are_committed_on_their_own() -> None:
    """The dispatcher commits its batch's completions with its next claim; when that
    transaction fails they are committed alone, and the claim is made alone."""
    sched = DurableScheduler(NoCombinedStore(), batch=4)
    for i in range(10):
        sched.schedule_once(f"t{i}", 0, NOOP)
    done = Collector()
    with Runner(sched, on_outcome=done):
        assert done.wait_for(10, timeout=10)
    assert sorted(str(o.task_id) for o in done.outcomes) == [f"t{i}" for i in range(10)]
    assert all(sched.status(f"t{i}") is Status.DONE for i in range(10))


def test_sqlite_writes_a_group_commit_in_one_statement_per_power_of_two_in_its_size(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A group commit's completions are written without reading their rows, one
    UPDATE and one INSERT for each power of two in their count, at most 256 rows a
    statement: 600 = 256 + 256 + 64 + 16 + 8."""
    store = SQLiteStore(tmp_path / "big.db", synchronous="NORMAL")
    sched = DurableScheduler(store, clock=clock, lease=100, batch=600)
    for i in range(600):
        sched.schedule_at_fixed_rate(f"t{i:03}", 0, 10, NOOP)
    held = [sched.table.claim(1000.0) for _ in range(600)]
    edits = [sched._stored._decided(t, None, 1000.0, 1000.0)[0] for t in held if t is not None]
    assert len(edits) == 600
    statements: list[str] = []
    store._db().set_trace_callback(statements.append)  # this thread's connection
    results = store.modify_many(edits)
    assert [r.value.task_id for r in results if r is not None] == [f"t{i:03}" for i in range(600)]
    wakes = [s for s in statements if "FROM rota_waits" in s]  # their dependants: woken
    assert len(wakes) == 2  # ids named by 512
    updates = [s for s in statements if "UPDATE rota_tasks" in s and s not in wakes]
    inserts = [s for s in statements if s.startswith("INSERT INTO rota_outcomes")]
    sizes = [256, 256, 64, 16, 8]
    assert [len(re.findall(r"'t\d{3}'", s)) for s in updates] == sizes  # each row's key
    assert [len(re.findall(r"'t\d{3}'", s)) for s in inserts] == sizes
    assert not [s for s in statements if s.startswith("SELECT")]  # no row read again
    assert {sched.next_run_time(f"t{i:03}") for i in range(600)} == {1010}
    assert len(sched.history("t599")) == 1
    store.close()


def test_sqlite_group_commits_of_any_size_take_nine_statement_texts_at_most() -> None:
    """Each new statement text is parsed and planned anew, and batch sizes vary with
    the runners' pace: the rows of a group commit go in pieces of power-of-two sizes
    (at most 256), in order, so that nine texts of a statement serve every size."""
    seen: set[int] = set()
    for n in range(700):
        rows = list(range(n))
        pieces = list(sqlite_pieces(rows))
        assert [r for piece in pieces for r in piece] == rows
        sizes = [len(piece) for piece in pieces]
        assert sizes == sorted(sizes, reverse=True)
        assert all(size & (size - 1) == 0 and size <= 256 for size in sizes)
        seen.update(sizes)
    assert seen == {2**k for k in range(9)}


def test_prune_deletes_old_outcomes_and_finished_tasks_only(
    sched: DurableScheduler, clock: ManualClock
) -> None:
    sched.schedule_at_fixed_rate("rate", 0, 10, NOOP)  # the clock is at 1000: 1000, 1010, ...
    sched.schedule_once("once", 5, NOOP)  # done at 1005
    sched.schedule_once("gone", 1, NOOP)
    sched.cancel("gone")  # finished without a run
    sched.schedule_once("later", 4000, NOOP)  # not due yet
    for now in (1000, 1005, 1010, 1020, 1030):  # each run finishes when it is due
        sched.tick(now)
    assert len(sched.history("rate", 100)) == 4
    with pytest.raises(TypeError, match="before"):
        sched.prune("soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch"):
        sched.prune(1015, batch=0)
    assert sched.prune(1015, batch=1) == 5  # rate@1000, rate@1010, once@1005; once, gone
    assert [o.slot for o in sched.history("rate", 100)] == [1030, 1020]
    assert sched.status("once") is None  # done, its outcome pruned: as if never there
    assert sched.status("gone") is None
    assert sched.status("rate") is Status.SCHEDULED
    assert sched.status("later") is Status.SCHEDULED
    assert sched.prune(1015) == 0
    assert sched.schedule_once("once", 10, NOOP)  # the id is free again


class FlakyStore(SQLiteStore):
    """A SQLite store that fails every call while ``down`` (a database outage)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise sqlite3.OperationalError("unable to open database file (outage)")

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().claim(*args, **kwargs)

    def complete_and_claim(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().complete_and_claim(*args, **kwargs)

    def modify_many(self, edits: Any) -> Any:
        self._check()
        return super().modify_many(edits)

    def next_due(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().next_due(*args, **kwargs)

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().heartbeat(*args, **kwargs)


def test_a_corrupt_store_file_is_named_as_such_once_not_as_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file that is not a database: the runner says what is wrong, once, however
    its reads and claims alternate (it logged "cannot be reached" and "reachable
    again" in turn, which is what an unreachable server gets)."""
    path = tmp_path / "c.db"
    sched = DurableScheduler(SQLiteStore(path), poll=0.02)
    sched.schedule("r", FixedRate(0.1), NOOP)
    sched.store.close()
    with open(path, "r+b") as f:  # the header, and with it every page, unreadable
        f.write(b"this is not a database, it is garbage" * 100)
    for name in ("c.db-wal", "c.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with Runner(sched):
        time.sleep(2.5)  # two retries
    failures = [r.getMessage() for r in caplog.records if "the store failed" in r.getMessage()]
    assert len(failures) == 1, failures
    assert "DatabaseError" in failures[0]
    assert "not a database" in failures[0]
    assert "answers again" not in caplog.text


def test_a_runner_outlives_a_store_outage_and_loses_no_slot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore(tmp_path / "o.db")
    sched = DurableScheduler(store, lease=0.5, poll=0.02)
    sched.schedule("r", FixedRate(0.1), NOOP)
    with Runner(sched) as runner:
        time.sleep(0.5)
        store.down = True  # claims, completions, wake-ups and heartbeats all fail
        time.sleep(1.5)
        assert runner.is_running
        store.down = False
        time.sleep(1.5)
        assert runner.is_running
    assert "the store failed (" in caplog.text
    # The recovery is said: "answers again" at the first claim, or, when a completion
    # failed in the outage too, "records completions again" at the first completion
    # recorded (which depends on where the outage cut a run)
    assert (
        "the store answers again" in caplog.text
        or "the store records completions again" in caplog.text
    )
    runs = sched.history("r", 1000)
    slots = sorted(run.slot for run in runs)
    assert all(abs(b - a - 0.1) < 1e-6 for a, b in itertools.pairwise(slots))  # none lost
    assert len(slots) == len(set(slots))  # each recorded once
    assert slots[-1] > time.time() - 0.5  # and it caught up


class FullDiskStore(FlakyStore):
    """Claims go through, completions fail: a disk with room for a lease, not a run."""

    def complete_and_claim(self, edits: Any, *args: Any, **kwargs: Any) -> Any:
        if self.down and edits:
            raise sqlite3.OperationalError("database or disk is full")
        return SQLiteStore.complete_and_claim(self, edits, *args, **kwargs)

    def modify_many(self, edits: Any) -> Any:
        if self.down and any(edit.expect is not None for edit in edits):
            raise sqlite3.OperationalError("database or disk is full")
        return SQLiteStore.modify_many(self, edits)

    def next_due(self, *args: Any, **kwargs: Any) -> Any:
        return SQLiteStore.next_due(self, *args, **kwargs)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        return SQLiteStore.claim(self, *args, **kwargs)


def test_while_completions_cannot_be_written_the_store_is_not_said_to_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a full disk the last line was "the store answers again" (a claim went
    through) while every completion still failed: that is said once one is recorded."""
    store = FullDiskStore(tmp_path / "d.db")
    sched = DurableScheduler(store, lease=0.5, poll=0.02)
    sched.schedule("r", FixedRate(0.1), NOOP)
    with Runner(sched):
        wait_until(lambda: sched.history("r", 1), 10)
        store.down = True
        wait_until(lambda: "could not be recorded" in caplog.text, 10)
        mark = len(caplog.records)
        time.sleep(1.0)
        failing = [r.getMessage() for r in caplog.records[mark:]]
        assert "the store answers again" not in failing
        store.down = False
        wait_until(lambda: "the store records completions again" in caplog.text, 10)


class FlakyTimeStore(FlakyStore):
    """A flaky store that keeps time, as PostgreSQL's does (the server's clock): its
    clock fails with it. When a wake-up could not read the store, the dispatcher fell
    back to that clock, which raised out of its loop and ended it for good."""

    def now(self) -> Any:
        self._check()
        return time.time()


@pytest.mark.parametrize("runner", ["thread", "asyncio"])
def test_a_runner_outlives_an_outage_of_a_store_that_keeps_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, runner: str
) -> None:
    store = FlakyTimeStore(tmp_path / "o.db")
    sched = DurableScheduler(store, lease=0.5, poll=0.02)
    sched.schedule("r", FixedRate(0.1), NOOP)

    def outage(running: Callable[[], bool]) -> None:
        time.sleep(0.5)
        store.down = True  # the store's reads, writes and clock all fail
        time.sleep(2.5)
        assert running()
        store.down = False
        wait_until(lambda: max(run.slot for run in sched.history("r", 1)) > time.time() - 0.5, 10)
        assert running()

    if runner == "thread":
        with Runner(sched) as thread:
            outage(lambda: thread.is_running)
    else:

        async def main() -> None:
            async with AsyncRunner(sched) as loop:
                await asyncio.to_thread(outage, lambda: loop.is_running)

        asyncio.run(main())
    assert "failed (1 times in a row); the dispatcher looks again" in caplog.text
    slots = sorted(run.slot for run in sched.history("r", 1000))
    assert all(abs(b - a - 0.1) < 1e-6 for a, b in itertools.pairwise(slots))  # none lost
    assert len(slots) == len(set(slots))  # each recorded once


def test_the_job_decorator_declares_with_ensure(store: Store) -> None:
    clock = ManualClock(0)
    sched = DurableScheduler(store, clock=clock)
    assert sched.job(FixedRate(10, delay=10))(jobs.noop) is jobs.noop
    assert [o.at for o in sched.tick(20)] == [10, 20]
    again = DurableScheduler(store, clock=clock)  # a restart declares it again
    again.job(FixedRate(10, delay=10))(jobs.noop)
    assert again.next_run_time("tests.durable.jobs.noop") == 30  # its place is kept
    with pytest.raises(TypeError, match="task_id must be a str"):
        again.job(FixedRate(10), task_id=3)(jobs.noop)


def test_stop_from_on_outcome_of_a_batch_committed_with_a_claim_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher commits its batch's completions in its next claim's transaction,
    under the runner's claim gate; on_outcome, which may stop the runner (taking that
    gate), is not called there. Nothing is left running: each later run either ran
    before the stop or was given back."""
    monkeypatch.setattr(durable_commit, "LINGER", 60.0)
    sched = DurableScheduler(SQLiteStore(tmp_path / "g.db"), batch=2)
    for name in "abcd":
        sched.schedule_once(name, 0, NOOP)
    _stop_from_on_outcome(sched, lambda outcome: True)
    assert [sched.status(name) for name in "ab"] == [Status.DONE] * 2
    assert {sched.status(name) for name in "cd"} <= {Status.DONE, Status.SCHEDULED}


def test_stop_from_on_outcome_of_a_held_back_completion_does_not_hang(tmp_path: Path) -> None:
    """A group-committed completion is reported by the committer thread while the
    runner runs the next task; an on_outcome that stops the runner there must not
    wait for the very reports it is part of (nor join its own thread)."""
    sched = DurableScheduler(SQLiteStore(tmp_path / "h.db"), batch=4, poll=0.01)
    sched.register("quick", jobs.noop)
    sched.register("slow", _slow)
    sched.schedule_once("a", 0, "quick")
    sched.schedule_once("b", 0.001, "slow")
    sched.schedule_once("c", 0.002, "quick")
    time.sleep(0.01)  # all three due: claimed in one batch, "a" held back while "b" runs
    _stop_from_on_outcome(sched, lambda outcome: outcome.task_id == "a")


def _stop_from_on_outcome(sched: DurableScheduler, this: Callable[[Any], bool]) -> None:
    """Run ``sched`` with a Runner whose on_outcome stops it at the first outcome that
    is ``this`` one; neither that stop() nor the next may hang."""
    stopped = threading.Event()
    runners: list[Runner] = []

    def stop_there(outcome: Any) -> None:
        if not stopped.is_set() and this(outcome):
            runners[0].stop()
            stopped.set()

    runner = Runner(sched, on_outcome=stop_there)
    runners.append(runner)
    runner.start()
    assert stopped.wait(10), "stop() from on_outcome hung"
    assert runner.stop(wait=True, timeout=10)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_runs_leave_no_garbage_for_the_cyclic_collector(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A completed run's task and the engine rebuilt for its row are freed at once, not
    by the cyclic collector, which a busy node would otherwise pay for on every run."""
    sched = DurableScheduler(make_store(kind, request, tmp_path), clock=lambda: 0.0)
    for i in range(50):
        sched.schedule(f"t{i}", FixedRate(10**9, start=0), NOOP)
    gc.collect()
    gc.disable()
    try:
        assert len(sched.tick(1.0)) == 50
        left = gc.collect()
    finally:
        gc.enable()
        sched.store.close()
    assert left < 50, f"{left} objects in reference cycles after 50 runs"


@pytest.mark.parametrize("kind", ["memory-scheduler", "memory", "sqlite", "postgres"])
def test_a_runners_runs_leave_no_garbage_for_the_cyclic_collector(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Nor does a runner's report of a run (its turn in the task's line and the report
    refer to each other until the turn is made): 200 runs through a Runner leave fewer
    than 50 objects in reference cycles (6 a run, 1,200, before the turn let go of its
    report)."""
    sched: Scheduler
    if kind == "memory-scheduler":
        sched = Scheduler()
        for i in range(200):
            sched.schedule_once(f"t{i}", 0, jobs.noop)
    else:
        sched = DurableScheduler(make_store(kind, request, tmp_path))
        for i in range(200):  # (each runs once: its next slot is in the year 2286)
            sched.schedule(f"t{i}", FixedRate(10**10, start=0), NOOP)
    seen = Collector()
    gc.collect()
    gc.disable()
    try:
        with Runner(sched, on_outcome=seen):
            seen.wait_for(200, timeout=60)
        left = gc.collect()
    finally:
        gc.enable()
        if isinstance(sched, DurableScheduler):
            sched.store.close()
    assert left < 50, f"{left} objects in reference cycles after 200 runs"


def test_a_reused_engine_carries_nothing_of_the_task_it_served_before() -> None:
    """A completed run's engine is reset and serves a later claim: a retry, a next slot
    or a finished task of the task it served before reaches no other task, so the runs
    are those of the in-memory scheduler, run by run."""

    def ok(at: Any) -> None:
        pass

    def boom(at: Any) -> None:
        raise RuntimeError("boom")

    seen: dict[str, list[tuple[Any, ...]]] = {}
    for kind in ("memory", "durable"):
        actions: dict[str, Any] = {"ok": ok, "boom": boom}
        sched = Scheduler(clock=lambda: 0.0)
        if kind == "durable":
            sched = durable = DurableScheduler(MemoryStore(), clock=lambda: 0.0)
            for name, action in actions.items():
                durable.register(name, action)
            actions = {name: name for name in actions}
        sched.schedule_once("once", 0.0, actions["ok"])
        sched.schedule_once("fails", 0.0, actions["boom"], max_retries=2)
        sched.schedule_at_fixed_rate("rate", 0.0, 3.0, actions["ok"])
        runs = []
        for now in range(8):
            runs += [(o.task_id, o.at, str(o.result), o.attempt) for o in sched.tick(now)]
        seen[kind] = sorted(runs)
        if kind == "durable":
            assert durable._stored._engines, "no engine was reused"
            assert all(engine.next_time() is None for engine in durable._stored._engines)
    assert seen["durable"] == seen["memory"]
    assert ("fails", 3.0, "failed", 2) in seen["durable"]  # after two retries


def test_every_store_keeps_each_nodes_heartbeat_and_prunes_the_old(store: Store) -> None:
    """What the nodes page reads, the same on every store: a node's first and last
    beat and its lease; a node whose last beat is older than a prune is forgotten."""
    sched = DurableScheduler(store, clock=ManualClock(1000))
    store.beat("a", 1000, 30)
    store.beat("b", 1005, 10)
    store.beat("a", 1020.5, 30)
    assert store.nodes() == [NodeRow("a", 1000, 1020.5, 30), NodeRow("b", 1005, 1005, 10)]
    sched.prune(1010)
    assert [n.node for n in store.nodes()] == ["a"]


def test_a_running_node_beats_while_it_holds_no_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "n.db")
    sched = DurableScheduler(store, lease=0.3, poll=0.02)
    with Runner(sched):
        wait_until(lambda: [n.node for n in store.nodes()] == [sched.node], 10)
        first = store.nodes()[0].seen
        wait_until(lambda: store.nodes()[0].seen > first, 10)
    assert store.nodes()[0].lease == 0.3


def test_a_node_taking_back_its_own_expired_run_does_not_say_elsewhere(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A lone node whose lease ran out (a stall) and that took the run over itself
    logged "lease lost (taken over elsewhere)": there was no elsewhere."""
    clock = ManualClock(0)
    sched = DurableScheduler(store, clock=clock, lease=5, node="lone", imports=True)
    sched.schedule_at_fixed_rate("r", 0, 100, NOOP)
    assert sched.table.claim(0) is not None  # held, then stalled past its lease
    clock.set(6)
    # the same node's claim (another thread of it: its dispatcher after the stall)
    # takes the expired run over, with a new fence
    again = DurableScheduler(store, clock=clock, lease=5, node="lone", imports=True)
    assert again.table.claim(6) is not None
    sched._stored._heartbeat(6)
    said = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert said == ["task 'r': lease lost (it ran out, and this node took the run over itself)"]
