"""Every result a store can record reads back through everything that shows it.

A store records one of ``ok``, ``retry``, ``failed`` and ``cancelled`` (a failed
run that a cancel ended: :func:`rota._core.types.recorded_result` decides which), read
back as a :class:`rota.Result` by :func:`rota._core.types.result_of`.
Before, a job whose latest run was ``cancelled`` (an ``overlap = "replace"``
run, or a cancelled job brought back) broke ``info``, ``status``, ``check`` and
five dashboard routes (``'cancelled' is not a valid Result``) until its next run.
Here any sequence of results is recorded by real runs, on every store, and then
read through ``info``, ``listing``, ``history``, the API, the pages and
``/metrics``; and through ``rota status`` and ``rota check`` as processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota import DurableScheduler, FixedRate, ManualClock, RunCancelled, Status
from rota._core.types import RECORDED, result_of
from rota.store import SQLiteStore
from tests.helpers import make_store

START = 1_800_000_000


class Recorder:
    """A task ``job`` whose successive slots end as ``plan`` says: each result made by
    what a real action does (returns, raises with or without a retry left, is ended
    by a cancel, after which the job is brought back as ``rota run`` brings back a
    cancelled job that its file declares again)."""

    def __init__(self, sched: DurableScheduler, clock: ManualClock) -> None:
        self.sched, self.clock, self.plan = sched, clock, list[str]()
        sched.register("act", self.act)

    def act(self, *, run: Any) -> None:
        wanted = self.plan[int(run.slot - START) // 10]
        if wanted == "ok" or (wanted == "retry" and run.attempt == 1):
            return
        if wanted == "cancelled":
            self.sched.cancel("job")
            raise RunCancelled("job 'job' was cancelled while it ran")
        raise ValueError(f"slot {run.slot} fails")

    def schedule(self, first: float) -> None:
        self.sched.schedule("job", FixedRate(10, start=first), "act", args=[],
                            max_retries=1, replace_existing=True)  # fmt: skip

    def record(self, plan: list[str]) -> list[str]:
        """Run one slot per result of ``plan``; the results recorded, oldest first."""
        self.plan = plan
        self.schedule(START)
        for k, wanted in enumerate(plan):
            slot = START + 10 * k
            self.clock.set(slot + (1 if wanted in ("retry", "failed") else 0))
            self.sched.tick(self.clock())
            if wanted == "cancelled":
                self.schedule(slot + 10)  # brought back
        return [str(o.result) for o in reversed(self.sched.history("job", 100))]


def expected(plan: list[str]) -> list[str]:
    """What ``record`` records for ``plan``: a retry is its slot's first run, then the
    retry's own result (``ok``, or ``failed`` once the retry is spent)."""
    found = []
    for wanted in plan:
        if wanted == "retry":
            found += ["retry", "ok"]
        elif wanted == "failed":
            found += ["retry", "failed"]
        else:
            found.append(wanted)
    return found


def read_everywhere(sched: DurableScheduler, last: str) -> None:
    """Every reader of a task's latest outcome answers, and agrees on ``last``."""
    from starlette.testclient import TestClient

    import rota.web

    info = sched.info("job")
    assert info is not None
    assert info.status is Status.SCHEDULED
    assert info.last_outcome is not None
    assert info.last_outcome.result is result_of(last)
    [entry] = sched.listing()
    assert entry.last is not None
    assert entry.last.result == last
    client = TestClient(rota.web.asgi_app(sched))
    jobs = client.get("/api/jobs")
    assert jobs.status_code == 200
    assert jobs.json()[0]["last"] == last
    assert client.get("/api/jobs/job").status_code == 200
    assert client.get("/api/jobs/job/history").json()[0]["result"] == last
    for page in ("/", "/jobs/job", "/failures", "/nodes", "/metrics", "/healthz"):
        answer = client.get(page)
        assert answer.status_code == 200, (page, answer.text[-2000:])


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.getfixturevalue("pg_dsn")  # a failure in CI, a skip elsewhere, if none
    return str(request.param)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(plan=st.lists(st.sampled_from(RECORDED), min_size=1, max_size=5))
def test_any_sequence_of_results_reads_back_through_every_view(
    kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    plan: list[str],
) -> None:  # fmt: skip
    if kind == "postgres":  # tables of this example's own (the fixture's prefix, then more)
        from rota.store import PostgresStore

        prefix = f"{request.getfixturevalue('pg_prefix')}{uuid.uuid4().hex[:6]}_"
        store: Any = PostgresStore(request.getfixturevalue("pg_dsn"), prefix=prefix,
                                   clock="caller")  # fmt: skip
    else:
        store = make_store(kind, request, tmp_path_factory.mktemp("results"))
    clock = ManualClock(START)
    sched = DurableScheduler(store, clock=clock)
    try:
        recorded = Recorder(sched, clock).record(plan)
        assert recorded == expected(plan)
        read_everywhere(sched, recorded[-1])
    finally:
        store.close()


@pytest.fixture
def cancelled_last(tmp_path: Path) -> str:
    """A SQLite store whose one job's latest run was ``cancelled``: its URL."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    clock = ManualClock(START)
    sched = DurableScheduler(store, clock=clock)
    assert Recorder(sched, clock).record(["ok", "cancelled"])[-1] == "cancelled"
    store.close()
    return f"sqlite:///{path}"


@pytest.mark.parametrize("command", ["status", "check"])
def test_the_command_reads_a_cancelled_latest_run(cancelled_last: str, command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rota", command, "--json", "--store", cancelled_last],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    if command == "status":
        assert listed[0]["last"] == "cancelled"
    else:  # a cancelled run is nobody's alert: the job, due next in 2027, is healthy
        assert listed == []
