"""Dependencies between tasks (issue 45): the condition as a value, what
``after=`` takes, cycles against a reachability oracle, waiting, waking and skipping
in memory and on every store (against memory, tick by tick), and two nodes on
PostgreSQL (a wake-up raced by a park, a wake-up across nodes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota import FixedRate, ManualClock, Once, Overlap, RunContext, Scheduler, Status, Upstream
from rota._core.deps import RUN, Verdict, cycle, cycle_text, upstreams, verdict
from tests.helpers import WHERE, AutoRegistering, make_store, scheduler_on, wait_until


def test_an_upstream_is_a_checked_immutable_value() -> None:
    assert Upstream("import") == Upstream("import", within="slot")
    assert Upstream("rates", timedelta(hours=1)).within == 3600
    assert hash(Upstream("a", "window")) == hash(Upstream("a", "window"))
    for value in (Upstream("a"), Upstream("a", "window"), Upstream("a", timedelta(minutes=5))):
        assert Upstream.from_json(value.to_json()) == value
    with pytest.raises(ValueError, match="within must be 'slot', 'window' or a timedelta"):
        Upstream("a", "hour")
    with pytest.raises(ValueError, match="positive timedelta"):
        Upstream("a", timedelta(0))
    with pytest.raises(TypeError, match="within must be"):
        Upstream("a", 3600)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task_id must be hashable"):
        Upstream(["a"])  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="immutable"):
        Upstream("a").within = "window"


def test_after_takes_an_id_an_upstream_or_a_list_of_them() -> None:
    assert upstreams(None) == ()
    assert upstreams("extract") == (Upstream("extract"),)
    assert upstreams([Upstream("import", "window"), "rates"]) == (
        Upstream("import", "window"),
        Upstream("rates"),
    )
    with pytest.raises(ValueError, match="after names 'a' more than once"):
        upstreams(["a", Upstream("a", "window")])
    with pytest.raises(TypeError, match="after must be a task id"):
        upstreams([3.5])


def test_a_cycle_is_named_in_order() -> None:
    edges = {"b": ["c"], "c": ["a"]}
    path = cycle(edges, "a", ["b"])
    assert path == ["a", "b", "c", "a"]
    assert cycle_text(path) == "'a' -> 'b' -> 'c' -> 'a'"
    assert cycle(edges, "a", []) is None
    assert cycle({"a": ["b"]}, "a", ["a"]) == ["a", "a"]  # after itself
    assert cycle({"a": ["b"], "b": ["a"]}, "c", ["a"]) is None  # not through c


nodes = st.integers(0, 6)
graphs = st.dictionaries(nodes, st.sets(nodes, max_size=3), max_size=7)


@settings(max_examples=300, deadline=None)
@given(graphs, nodes, st.sets(nodes, max_size=3))
def test_cycles_against_reachability(edges: dict[int, set[int]], task: int, new: set[int]) -> None:
    graph = {**edges, task: new}
    seen, todo = set(), list(new)
    while todo:  # what the task waits for, at any depth
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    path = cycle(edges, task, new)
    assert (path is not None) == (task in seen)
    if path is not None:
        assert path[0] == path[-1] == task
        assert all(b in graph.get(a, set()) for a, b in pairwise(path))


class Hourly:
    """An upstream's record: hourly slots from 0, results by slot, its latest ok start."""

    def __init__(self, results: dict[float, str], latest_ok: float | None = None) -> None:
        self.results, self.ok = results, latest_ok

    def slots(self, low: float, high: float) -> list[float]:
        return [float(h * 3600) for h in range(48) if low <= h * 3600 < high]

    def latest_slot(self, at: float) -> float | None:
        return None if at < 0 else float(int(at // 3600) * 3600)

    def result(self, slot: float) -> str | None:
        return self.results.get(slot)

    def latest_ok(self) -> float | None:
        return self.ok


DAY = (0.0, 86400.0)


def test_a_slot_waits_runs_or_is_skipped_as_its_upstreams_say() -> None:
    all_ok = Hourly({float(h * 3600): "ok" for h in range(24)}, latest_ok=80000)
    half = Hourly({float(h * 3600): "ok" for h in range(12)})
    failed = Hourly({**{float(h * 3600): "ok" for h in range(24)}, 7200.0: "failed"})
    records = {"all": all_ok, "half": half, "failed": failed}

    def record(task_id: object) -> Hourly | None:
        return records.get(str(task_id))

    window = [Upstream("all", "window")]
    assert verdict(window, 86400, DAY, record) == RUN
    waiting = verdict([Upstream("half", "window")], 86400, DAY, record)
    assert waiting.kind == "wait"
    assert waiting.waiting[0] == "half@43200.0"
    assert len(waiting.waiting) == 12
    assert verdict([Upstream("failed", "window")], 86400, DAY, record) == Verdict(
        "skip", (), "failed@7200.0"
    )
    assert verdict([Upstream("half")], 7200, DAY, record) == RUN  # its 02:00 slot: ok
    assert verdict([Upstream("half")], 50000, DAY, record).waiting == ("half@46800.0",)
    assert verdict([Upstream("missing")], 7200, DAY, record).waiting == ("missing",)
    fresh = Upstream("all", timedelta(hours=2))
    assert verdict([fresh], 86400, DAY, record) == RUN  # ok at 80000 >= 86400 - 7200
    assert verdict([fresh], 100000, DAY, record).waiting == ("all",)  # too old: waits
    assert verdict([Upstream("half", timedelta(hours=1))], 10, DAY, record).waiting == ("half",)
    both = verdict([Upstream("half", "window"), Upstream("failed", "window")], 86400, DAY, record)
    assert both.kind == "skip"  # one that never holds skips the slot


def test_a_job_files_after_reads_ids_and_tables(tmp_path: Path) -> None:
    from rota.cli._jobfile import load
    from rota.cli._values import JobFileError

    jobs = tmp_path / "jobs.toml"
    head = '[[jobs]]\nid = "report"\ncron = "0 6 * * *"\ncommand = "true"\n'
    jobs.write_text(
        head
        + 'after = [{ job = "import", within = "window" }, { job = "rates", within = "1h" }]\n'
    )
    (job,) = load(jobs, imports=False)
    assert job.after == (Upstream("import", "window"), Upstream("rates", timedelta(hours=1)))
    jobs.write_text(head + 'after = ["import"]\n')
    assert load(jobs, imports=False)[0].after == (Upstream("import"),)
    for bad, words in (
        ('after = [{ job = "a", within = "soon" }]', "within: 'soon' is not a duration"),
        ("after = [3]", "3 is not a job id or"),
        ('after = ["a", "a"]', "after names 'a' more than once"),
        ('after = [{ task = "a" }]', "is not a job id or"),
    ):
        jobs.write_text(head + bad + "\n")
        with pytest.raises(JobFileError, match=f"job 'report': key 'after'.*{words}"):
            load(jobs, imports=False)


# -- the engine: waiting, waking, skipping (memory) ---------------------------------


class Log:
    """Actions that record ``(task, slot)`` of each run; ``fail`` names tasks whose runs
    raise."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float]] = []
        self.fail: set[str] = set()

    def __call__(self, name: str) -> Any:
        def action(at: float, *, run: RunContext) -> None:
            self.runs.append((name, run.slot))
            if name in self.fail:
                raise RuntimeError(f"{name} failed")

        return action


Make = Callable[[ManualClock], Scheduler]


@pytest.fixture(params=WHERE)
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Makes a scheduler on a given manual clock, in memory or on each store."""
    stores: list[Any] = []

    def make(clock: ManualClock) -> Scheduler:
        made, store = scheduler_on(request.param, request, tmp_path, clock)
        stores.append(store)
        return made

    yield make
    for store in stores:
        if store is not None:
            store.close()


def made(kind: Make, **tasks: tuple[Any, Any]) -> tuple[Scheduler, ManualClock, Log]:
    clock = ManualClock(0.0)
    sched = kind(clock)
    log = Log()
    for name, (when, after) in tasks.items():
        sched.schedule(name, when, log(name), after=after)
    return sched, clock, log


def step(sched: Scheduler, clock: ManualClock, to: float) -> list[Any]:
    clock.advance(to - clock())
    return sched.tick(to)


def test_a_slot_waits_for_its_upstreams_slot_and_runs_in_the_same_tick(kind: Make) -> None:
    sched, clock, log = made(kind, load=(FixedRate(10, start=10), "extract"),
                             extract=(FixedRate(10, start=10), None))  # fmt: skip
    step(sched, clock, 10)
    assert log.runs == [("extract", 10), ("load", 10)]  # load was due first: it waited


def test_a_waiting_slot_shows_what_it_waits_for_and_costs_nothing_per_tick(kind: Make) -> None:
    sched, clock, log = made(kind, load=(FixedRate(10, start=10), "extract"),
                             extract=(FixedRate(10, start=15), None))  # fmt: skip
    step(sched, clock, 10)
    info = sched.info("load")
    assert info is not None
    assert info.status is Status.SCHEDULED
    assert info.waiting_for == ("extract",)  # no slot of extract yet at or before 10
    assert info.next_run_time == 10
    assert sched.next_run_time() == 15  # the waiting run is not due again before
    step(sched, clock, 15)
    assert log.runs == [("extract", 15)]  # extract@15 is after load's slot 10
    assert sched.info("load").waiting_for == ("extract",)  # type: ignore[union-attr]


def test_a_failed_upstream_skips_the_slot_at_once_and_the_next_slot_waits_in_its_place(
    kind: Any,
) -> None:
    sched, clock, log = made(kind, extract=(FixedRate(10, start=10), None),
                             load=(FixedRate(10, start=10), "extract"))  # fmt: skip
    log.fail.add("extract")
    outcomes = step(sched, clock, 10)
    assert log.runs == [("extract", 10)]
    assert sched.info("load").last_skipped == (10, "upstream", "extract@10")  # type: ignore[union-attr]
    log.fail.clear()
    outcomes = step(sched, clock, 20)
    assert log.runs[1:] == [("extract", 20), ("load", 20)]
    (load,) = [o for o in outcomes if o.task_id == "load"]
    assert dict(load.skipped_by) == {"upstream": 1}


def test_a_waiting_slot_is_skipped_when_its_tasks_next_slot_falls_due(kind: Make) -> None:
    sched, clock, log = made(kind, load=(FixedRate(10, start=10), Upstream("extract")),
                             extract=(FixedRate(100, start=10), None))  # fmt: skip
    sched.pause("extract")  # its dependants wait, they do not fail
    step(sched, clock, 10)
    assert sched.info("load").waiting_for == ("extract@10",)  # type: ignore[union-attr]
    step(sched, clock, 20)  # load@20 is due: load@10 is skipped, load@20 waits for extract@10
    info = sched.info("load")
    assert info is not None
    assert info.last_skipped == (10, "upstream", "extract@10")
    assert info.waiting_for == ("extract@10",)
    assert info.next_run_time == 20
    sched.resume("extract")
    step(sched, clock, 21)
    assert log.runs == [("extract", 10), ("load", 20)]


def test_a_waiting_slots_deadline_skips_it(kind: Make) -> None:
    clock = ManualClock(0.0)
    sched = kind(clock)
    log = Log()
    sched.schedule("extract", FixedRate(100, start=50), log("extract"))
    sched.schedule("load", FixedRate(100, start=10), log("load"), after="extract", deadline=5)
    step(sched, clock, 10)
    assert sched.info("load").waiting_for == ("extract",)  # type: ignore[union-attr]
    step(sched, clock, 16)
    assert sched.info("load").last_skipped == (10, "upstream", "extract")  # type: ignore[union-attr]
    assert sched.info("load").next_run_time == 110  # type: ignore[union-attr]


def test_the_daily_report_waits_for_every_hourly_import_of_its_window(kind: Make) -> None:
    hour = 3600.0
    sched, clock, log = made(kind, imports=(FixedRate(hour, start=hour), None),
                             report=(FixedRate(4 * hour, start=4 * hour),
                                     Upstream("imports", within="window")))  # fmt: skip
    step(sched, clock, hour)
    log.fail.add("imports")
    step(sched, clock, 2 * hour)
    log.fail.clear()
    step(sched, clock, 4 * hour)  # imports@2h failed for good: the report's window lost it
    assert ("report", 4 * hour) not in log.runs
    assert sched.info("report").last_skipped == (4 * hour, "upstream", f"imports@{2 * hour!r}")  # type: ignore[union-attr]
    for k in range(5, 9):
        step(sched, clock, k * hour)
    assert ("report", 8 * hour) in log.runs  # imports 4h..7h all ran ok
    assert log.runs.index(("report", 8 * hour)) > log.runs.index(("imports", 7 * hour))


def test_freshness_waits_for_a_recent_ok_run_and_never_skips_for_it(kind: Make) -> None:
    clock = ManualClock(0.0)
    sched = kind(clock)
    log = Log()
    sched.schedule("rates", Once(50), log("rates"))
    sched.schedule("price", FixedRate(100, start=10), log("price"),
                   after=Upstream("rates", timedelta(seconds=60)))  # fmt: skip
    step(sched, clock, 10)
    assert sched.info("price").waiting_for == ("rates",)  # type: ignore[union-attr]
    step(sched, clock, 50)
    assert log.runs == [("rates", 50), ("price", 10)]


def test_a_trigger_runs_now_regardless_of_upstreams(kind: Make) -> None:
    sched, clock, log = made(kind, load=(FixedRate(100, start=10), "extract"),
                             extract=(FixedRate(100, start=500), None))  # fmt: skip
    step(sched, clock, 10)
    assert sched.info("load").waiting_for == ("extract",)  # type: ignore[union-attr]
    clock.advance(1)
    assert sched.trigger("load")
    step(sched, clock, 11)
    assert log.runs == [("load", 11)]
    assert sched.info("load").waiting_for == ("extract",)  # type: ignore[union-attr]


def test_an_upstream_not_scheduled_yet_is_waited_for(kind: Make) -> None:
    sched, clock, log = made(kind, load=(FixedRate(100, start=10), "extract"))
    step(sched, clock, 10)
    assert sched.info("load").waiting_for == ("extract",)  # type: ignore[union-attr]
    sched.schedule("extract", Once(at=5), log("extract"))
    step(sched, clock, 11)
    assert log.runs == [("extract", 5), ("load", 10)]


def test_a_cancelled_upstream_skips_what_waits_for_it(kind: Make) -> None:
    sched, clock, _ = made(kind, load=(FixedRate(100, start=10), "extract"),
                             extract=(FixedRate(100, start=10), None))  # fmt: skip
    sched.pause("extract")
    step(sched, clock, 10)
    sched.cancel("extract")
    step(sched, clock, 11)
    assert sched.info("load").last_skipped == (10, "upstream", "extract@10")  # type: ignore[union-attr]


def test_cycles_are_refused_by_schedule_and_update_before_anything_changes(kind: Make) -> None:
    sched = kind(ManualClock(0.0))
    log = Log()
    sched.schedule("a", FixedRate(10), log("a"), after="b")
    sched.schedule("b", FixedRate(10), log("b"), after="c")
    with pytest.raises(ValueError, match=r"after would make a cycle: 'c' -> 'a' -> 'b' -> 'c'"):
        sched.schedule("c", FixedRate(10), log("c"), after="a")
    assert sched.status("c") is None
    sched.schedule("c", FixedRate(10), log("c"))
    with pytest.raises(ValueError, match="cycle: 'c' -> 'a' -> 'b' -> 'c'"):
        sched.update("c", after=["a"])
    assert sched.info("c").waiting_for == ()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"does not go with Overlap\.allow"):
        sched.schedule("d", FixedRate(10), log("d"), after="a", overlap=Overlap.allow(2))
    with pytest.raises(TypeError, match="after must be a task id"):
        sched.schedule("e", FixedRate(10), log("e"), after=[1.5])


Dag = tuple[dict[int, set[int]], set[tuple[int, int]], list[int], list[int]]


@st.composite
def dags(draw: st.DrawFn) -> Dag:
    """A random DAG of 2 to 6 tasks (edges to lower ids), failing runs, tick jumps, and
    the order the tasks are scheduled in."""
    n = draw(st.integers(2, 6))
    ups = {t: draw(st.sets(st.integers(0, t - 1), max_size=3)) if t else set()
           for t in range(n)}  # fmt: skip
    fails = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(1, 12))))
    jumps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
    return ups, fails, jumps, draw(st.permutations(list(range(n))))


def simulate(sched: Scheduler, clock: ManualClock, dag: Dag) -> tuple[list[Any], list[Any]]:
    """The DAG's tasks on one fixed rate, each waiting for its upstreams' same slot; the
    ticks: what ran at each (sorted), and every outcome."""
    ups, fails, jumps, order = dag
    runs: list[tuple[str, int]] = []

    def action(t: str) -> Any:
        def run(at: float, *, run: RunContext) -> None:
            runs.append((t, int(run.slot) // 10))
            if (int(t), int(run.slot) // 10) in fails:
                raise RuntimeError("failed")

        return run

    for t in order:  # scheduled in any order: upstreams may come later
        sched.schedule(str(t), FixedRate(10, start=10), action(str(t)),
                       after=[Upstream(str(u)) for u in ups[t]])  # fmt: skip
    ticks, outcomes = [], []
    for jump in jumps:
        clock.advance(10 * jump)
        done = len(runs)
        outcomes += sched.tick(clock())
        ticks.append(runs[done:])
    return ticks, outcomes


@settings(max_examples=60, deadline=None)
@given(dag=dags())
def test_runs_match_an_oracle_over_random_dags_failures_and_tick_jumps(dag: Dag) -> None:
    """Runs failing at random, ticks jumping over several slots at random. Oracle: a
    slot runs iff every upstream's same slot ran and ended ok; every other slot is
    skipped and counted; no downstream run comes before its upstreams' in the log."""
    ups, fails, _, _ = dag
    clock = ManualClock(0.0)
    ticks, outcomes = simulate(Scheduler(clock=clock, epoch=True), clock, dag)
    runs = [run for tick in ticks for run in tick]
    last = int(clock()) // 10
    ran: dict[tuple[int, int], bool] = {}
    for k in range(1, last + 1):
        for t in range(len(ups)):
            ran[t, k] = all(ran[u, k] and (u, k) not in fails for u in ups[t])
    assert sorted(runs) == sorted((str(t), k) for (t, k), did in ran.items() if did)
    assert len(set(runs)) == len(runs)
    for i, (t, k) in enumerate(runs):
        assert all((str(u), k) in runs[:i] for u in ups[int(t)])
    for t in range(len(ups)):  # every slot up to its latest run ran, or was skipped and counted
        mine = [k for u, k in runs if u == str(t)]
        skipped = sum(o.skipped_by.get("upstream", 0) for o in outcomes if o.task_id == str(t))
        assert len(mine) + skipped == max(mine, default=0)


@pytest.mark.parametrize("where", ["memory", "sqlite", "postgres"])
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(dag=dags())
def test_every_store_runs_what_memory_runs_tick_by_tick(
    where: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    dag: Dag,
) -> None:  # fmt: skip
    """The same DAG, failures and ticks on a store: the same runs at each tick, the same
    skips, as in memory."""
    if where == "postgres":
        from rota.store import PostgresStore

        prefix = f"{request.getfixturevalue('pg_prefix')}{uuid.uuid4().hex[:6]}_"
        store: Any = PostgresStore(request.getfixturevalue("pg_dsn"), prefix=prefix,
                                   clock="caller")  # fmt: skip
    else:
        store = make_store(where, request, tmp_path_factory.mktemp("dag"))
    try:
        clock = ManualClock(0.0)
        expected = simulate(Scheduler(clock=clock, epoch=True), clock, dag)
        clock = ManualClock(0.0)
        got = simulate(AutoRegistering(store, clock=clock), clock, dag)
    finally:
        store.close()
    assert [sorted(tick) for tick in got[0]] == [sorted(tick) for tick in expected[0]]
    skips = [sorted((o.task_id, o.at, dict(o.skipped_by)) for o in found) for found in
             (got[1], expected[1])]  # fmt: skip
    assert skips[0] == skips[1]


def test_backfill_downstream_runs_each_slot_after_its_upstreams_backfilled_slot(
    kind: Make,
) -> None:
    sched, clock, log = made(kind, report=(FixedRate(10, start=100), "imports"),
                             loads=(FixedRate(10, start=100), "report"),
                             imports=(FixedRate(10, start=100), None))  # fmt: skip
    clock.set(90)
    assert sched.backfill("imports", 50, 80, downstream=True) == 9  # 3 slots, 3 tasks
    step(sched, clock, 95)
    order = [run for run in log.runs if run[1] < 100]
    assert sorted(order) == sorted((t, s) for t in ("imports", "report", "loads")
                                   for s in (50, 60, 70))  # fmt: skip
    for task, up in (("report", "imports"), ("loads", "report")):
        for slot in (50, 60, 70):
            assert order.index((up, slot)) < order.index((task, slot))
    assert sched.backfill("report", 30, 40) == 1  # without downstream: that task alone


def test_a_run_parked_while_its_upstreams_end_commits_on_postgresql_is_woken(
    request: pytest.FixtureRequest,
) -> None:
    """Read committed: node b's group commit ends ``extract``@10 and runs its wake-up
    statement, then waits to commit; node a meanwhile decides ``load``@10 (its
    upstream still running, as committed) and parks it. The park locks the
    upstream's row for share, so it commits after b's end, and a's check after its
    write sees the end: ``load``@10 runs at 10, not at its next slot. Without that
    lock the wake-up (its snapshot taken before the park) and the check (before the
    end's commit) both missed the other."""
    import threading

    import psycopg

    from rota.store import PostgresStore

    dsn, prefix = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_prefix")
    paused, go = threading.Event(), threading.Event()

    class Pausing(PostgresStore):
        def _at(self, point: str) -> None:  # b's commit, held before it is sent
            if point == "completions: results" and not paused.is_set():
                paused.set()
                assert go.wait(30)

    clock = ManualClock(0.0)
    stores = [PostgresStore(dsn, prefix=prefix, clock="caller"),
              Pausing(dsn, prefix=prefix, clock="caller")]  # fmt: skip
    a, b = (AutoRegistering(store, clock=clock, lease=100) for store in stores)
    log = Log()
    a.schedule("extract", FixedRate(10, start=10), log("extract"))
    a.schedule("other", FixedRate(10, start=10), log("other"))
    a.schedule("load", FixedRate(10, start=10), log("load"), after="extract")
    for name, action in a.auto.items():
        b.register(name, action)
    clock.set(10)
    held = [b.table.claim(10.0, room=1) for _ in "ab"]  # extract, other: running on b
    assert [t.task_id for t in held if t is not None] == ["extract", "other"]
    ends = [b._stored._decided(t, None, 10.0, 10.0)[0] for t in held if t is not None]
    ended = threading.Thread(target=stores[1].modify_many, args=(ends,))
    parked = threading.Thread(target=a.tick, args=(10.0,))
    try:
        ended.start()
        assert paused.wait(30)  # b: extract's row written, its wake-up run, not committed
        parked.start()  # a: claims load, finds extract running, parks load@10

        def blocked() -> bool:
            with psycopg.connect(dsn, autocommit=True) as db:
                found = db.execute("SELECT count(*) FROM pg_stat_activity "
                                   "WHERE wait_event_type = 'Lock'").fetchone()  # fmt: skip
            return found is not None and found[0] > 0

        wait_until(lambda: not parked.is_alive() or blocked(), timeout=30)
        assert parked.is_alive()  # the park waits for the end's commit
    finally:
        go.set()
        ended.join(30)
        parked.join(30)
    a.tick(10.0)
    assert ("load", 10) in log.runs
    assert a.info("load").waiting_for == ()  # type: ignore[union-attr]
    for store in stores:
        store.close()


def test_a_node_idle_until_its_next_poll_starts_a_run_woken_on_another_node_at_once(
    request: pytest.FixtureRequest,
) -> None:
    """PostgreSQL, two real nodes (``Runner``s) polling every 30 s: ``up`` runs on one,
    ``down`` (after it) on the other, both hourly. The end of ``up`` wakes ``down``
    and notifies the nodes, and the other node hears it though another write's
    notice had woken it a moment before: ``down`` starts within seconds, not at the
    other node's next poll."""
    import threading
    import time

    from rota import Runner
    from rota.durable import DurableScheduler
    from rota.store import PostgresStore

    dsn, prefix = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_prefix")
    ended: list[float] = []
    started = threading.Event()
    a, b = (DurableScheduler(PostgresStore(dsn, prefix=prefix), poll=30, lease=90)
            for _ in "ab")  # fmt: skip

    def up(*, run: RunContext) -> None:  # a write the other node hears, then the end
        a.schedule_once("noise", time.time() + 0.5, "noise", args=())
        time.sleep(0.3)
        ended.append(time.time())

    a.register("up", up)
    a.register("noise", lambda: None)
    b.register("down", started.set)
    first = time.time() + 1
    a.schedule("up", FixedRate(3600, start=first), "up", args=())
    b.schedule("down", FixedRate(3600, start=first), "down", args=(), after="up")
    with Runner(a), Runner(b):
        assert started.wait(15)  # the other node's next poll: 30 s away
    assert ended
    assert [o.result for o in b.history("down")] == ["ok"]
    for sched in (a, b):
        sched.store.close()
