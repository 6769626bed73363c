"""A plan as JSON, both ways (``rota._core.stored``): every row a store holds, after any
sequence of scheduling calls and runs, reads back into a plan whose spec and state
are that row's own, to the key. The spec is what the task was scheduled with; the
state what its runs have done (retries, skips, backlog, the controls' counters)."""

from __future__ import annotations

from datetime import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rota import FixedRate, ManualClock, Once
from rota._core.stored import plan_from_json, plan_spec, plan_state, policies_of
from rota.calendars import Calendar, Window
from rota.durable import DurableScheduler
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.retry import Backoff
from rota.store import MemoryStore

START = 1_800_000_000.0
KEYS = ("schedule", "max_retries", "retry", "retry_on", "misfire", "overlap", "deadline",
        "jitter", "end", "max_runs", "calendar")  # fmt: skip
CALENDAR = Calendar(  # START is 08:00 UTC: the slots of 08:01-08:03 are excluded
    "c", weekends=(), exclude=[Window(time(8, 1), time(8, 3))]
)


OWN = ("next", "full", "flying")


def flaky(fail: bool = False) -> None:
    if fail:
        raise ValueError("planned failure")


options = st.fixed_dictionaries(
    {},
    optional={
        "max_retries": st.integers(0, 3),
        "retry": st.sampled_from([Backoff(2), Backoff(1, cap=5)]),
        "retry_on": st.just(ValueError),
        "misfire": st.sampled_from([Misfire.SKIP, Misfire.COALESCE, Misfire.bounded(2)]),
        "overlap": st.sampled_from([Overlap.SKIP, Overlap.allow(2)]),
        "deadline": st.integers(1, 30),
        "jitter": st.integers(1, 5),
        "max_runs": st.integers(1, 5),
        "priority": st.integers(-2, 2),
        "on_excluded": st.sampled_from(["skip", "next", "previous"]),
    },
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(1, 60)),
        st.tuples(st.just("pause"), st.integers(0, 2)),
        st.tuples(st.just("resume"), st.integers(0, 2)),
        st.tuples(st.just("trigger"), st.integers(0, 2)),
        st.tuples(st.just("update"), st.integers(0, 2)),
    ),
    max_size=12,
)


def check_rows(sched: DurableScheduler) -> int:
    """Each stored row's spec and state, read into a plan and written again, are the
    row's own. Returns how many rows were checked."""
    rows = [row for row, _ in sched.store.page(None, None)]
    for row in rows:
        plan = plan_from_json(row.spec, row.state, policies_of(row.spec), row.priority,
                              row.paused)  # fmt: skip
        # (the default retry policy is stored with the task: no default is needed back)
        spec = plan_spec(plan, None, 1)
        assert {k: row.spec.get(k) for k in KEYS} == {k: spec.get(k) for k in KEYS}
        # (a concurrent task's runs in flight come back as runs, through the engine:
        # StoredEngine.adopt_runs; "next"/"full" are the row's, not the plan's)
        state = plan_state(plan)
        state.pop("flying", None)
        assert {k: v for k, v in row.state.items() if k not in OWN} == state
    return len(rows)


@settings(max_examples=60, deadline=None)
@given(st.lists(options, min_size=1, max_size=3), steps, st.booleans())
def test_every_stored_plan_reads_back_as_itself(
    tasks: list[dict[str, Any]], plan: list[tuple[str, int]], fail: bool
) -> None:
    clock = ManualClock(START)
    sched = DurableScheduler(MemoryStore(), clock=clock)
    sched.register("flaky", flaky)
    for i, given_options in enumerate(tasks):
        calendar: dict[str, Any] = {"calendar": CALENDAR} if "on_excluded" in given_options else {}
        sched.schedule(f"t{i}", FixedRate(10), "flaky", kwargs={"fail": fail}, **given_options,
                       **calendar)  # fmt: skip
    sched.schedule("once", Once(at=START + 5), "flaky", max_retries=1, kwargs={"fail": fail})
    assert check_rows(sched) == len(tasks) + 1
    ids = [f"t{i}" for i in range(len(tasks))]
    for kind, value in plan:
        if kind == "tick":
            clock.advance(value)
            sched.tick(clock())
        elif kind == "update":
            sched.update(ids[value % len(ids)], max_retries=value, jitter=value + 1)
        else:
            getattr(sched, kind)(ids[value % len(ids)])
        check_rows(sched)
