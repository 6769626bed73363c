"""Many nodes on PostgreSQL: real processes, a real server, faults injected.

Each test runs worker processes (``worker.py``, ``pg:PREFIX``) sharing one
schedule on the server ``make test`` starts, injects a fault, and checks the
effects keyed by (task, slot) and the recorded outcomes: 0 lost, 0 duplicate
completions, duplicate starts only for runs in flight on nodes that lost
their lease.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cadence import DurableScheduler, FixedRate, Status

ROOT = Path(__file__).resolve().parents[2]
EFFECT = "tests.durable.jobs:effect"


class Nodes:
    """Worker processes on one PostgreSQL schedule, and what they did."""

    def __init__(self, dsn: str, prefix: str, tmp: Path) -> None:
        from cadence.store import PostgresStore

        self.dsn, self.prefix = dsn, prefix
        self.store = PostgresStore(dsn, prefix=prefix)
        self.sched = DurableScheduler(self.store)
        self.effects = str(tmp / "effects.db")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def spawn(self, **env: str) -> subprocess.Popen[bytes]:
        full = {**os.environ, "CADENCE_PG_DSN": self.dsn, "EFFECTS_DB": self.effects,
                "PYTHONPATH": str(ROOT), **env}  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.durable.worker", f"pg:{self.prefix}"],
            cwd=ROOT, env=full, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.kills += 1

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(30)
        self.store.close()

    def wait_until(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"not done after {timeout} s"
            time.sleep(0.05)

    def starts(self) -> Counter[str]:
        path = self.effects + ".starts"
        if not os.path.exists(path):
            return Counter()
        with open(path) as f:
            return Counter(line.split()[0] for line in f if line.strip())

    def effect_keys(self) -> set[str]:
        if not os.path.exists(self.effects):
            return set()
        db = sqlite3.connect(self.effects)
        try:
            return {key for (key,) in db.execute("SELECT key FROM effects")}
        finally:
            db.close()

    def completions(self) -> Counter[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.dsn) as db:
            rows = db.execute(
                f"SELECT task_id, slot, attempt FROM {self.prefix}outcomes"
            ).fetchall()
        return Counter(tuple(r) for r in rows)

    def done(self, ids: list[str]) -> bool:
        return all(self.sched.status(i) is Status.DONE for i in ids)


@pytest.fixture
def nodes(pg_dsn: str, pg_prefix: str, tmp_path: Path) -> Iterator[Nodes]:
    n = Nodes(pg_dsn, pg_prefix, tmp_path)
    try:
        yield n
    finally:
        n.close()


def _check(nodes: Nodes, ids: list[str]) -> None:
    completions = nodes.completions()
    assert all(count == 1 for count in completions.values())  # 0 duplicate completions
    keys = {f"{i}@{nodes.sched.history(i)[0].slot!r}" for i in ids}
    assert nodes.effect_keys() == keys  # 0 lost


def test_sigkill_of_random_nodes_under_load(nodes: Nodes) -> None:
    ids = [f"t{i:03}" for i in range(120)]
    for i, task_id in enumerate(ids):
        nodes.sched.schedule_once(task_id, 0.3 + i * 0.02, EFFECT, args=[])
    env = {"LEASE": "1", "EFFECT_SLEEP": "0.02"}
    workers = [nodes.spawn(**env) for _ in range(3)]
    rng = random.Random(11)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.6))
        victim = rng.randrange(len(workers))
        nodes.kill(workers[victim])
        workers[victim] = nodes.spawn(**env)
    nodes.wait_until(lambda: nodes.done(ids), timeout=30)
    _check(nodes, ids)
    assert sum(n - 1 for n in nodes.starts().values()) <= nodes.kills


def test_a_stopped_node_writes_nothing_when_it_wakes(nodes: Nodes) -> None:
    nodes.sched.schedule_once("x", 0, EFFECT, args=[])
    sleeper = nodes.spawn(LEASE="0.5", EFFECT_SLEEP="0.5")
    nodes.wait_until(lambda: bool(nodes.starts()), timeout=10)
    sleeper.send_signal(signal.SIGSTOP)  # for three leases
    taker = nodes.spawn(LEASE="0.5")
    nodes.wait_until(lambda: nodes.done(["x"]), timeout=10)
    time.sleep(1.5 - 0.5)
    sleeper.send_signal(signal.SIGCONT)
    time.sleep(1.0)  # it ends its action and tries to complete: fenced off
    [outcome] = nodes.sched.history("x")
    assert outcome.owner is not None
    assert str(taker.pid) in outcome.owner
    _check(nodes, ["x"])


@pytest.mark.parametrize("offset", [3600, -3600])
def test_a_node_whose_clock_is_an_hour_off_runs_nothing_early_and_steals_nothing(
    nodes: Nodes, offset: int
) -> None:
    """Leases and due times are the server's: the skewed node's clock only changes
    when it wakes up."""
    nodes.sched.schedule("r", FixedRate(0.3, delay=1.0), EFFECT, args=[])
    skewed = nodes.spawn(LEASE="1", CLOCK_OFFSET=str(offset))
    honest = nodes.spawn(LEASE="1")
    time.sleep(3.0)
    for proc in (skewed, honest):
        proc.terminate()
        proc.wait(10)
    history = nodes.sched.history("r", 100)
    assert history
    assert all(o.started is not None and o.started >= o.at - 0.01 for o in history)  # none early
    slots = sorted(o.slot for o in history)
    assert all(abs(b - a - 0.3) < 1e-6 for a, b in itertools.pairwise(slots))  # none lost
    assert all(n == 1 for n in nodes.completions().values())
    assert sum(nodes.starts().values()) == len(nodes.completions())  # no stolen lease


def test_an_immediate_server_restart_under_load_loses_nothing(nodes: Nodes) -> None:
    """``pg_ctl restart -m immediate`` (a server crash) while two nodes run: they
    reconnect with backoff; a commit whose outcome was unknown is resolved."""
    bindir, data = os.environ.get("CADENCE_PG_BIN"), os.environ.get("CADENCE_PG_DATA")
    if not bindir or not data:
        pytest.skip("needs the server tests/postgres_server.py starts (CADENCE_PG_BIN)")
    ids = [f"t{i:03}" for i in range(80)]
    for i, task_id in enumerate(ids):
        nodes.sched.schedule_once(task_id, 0.2 + i * 0.03, EFFECT, args=[])
    for _ in range(2):
        nodes.spawn(LEASE="2", EFFECT_SLEEP="0.01")
    time.sleep(1.0)
    log = str(Path(data).parent / "server.log")  # not a pipe: the server outlives pg_ctl
    command = [f"{bindir}/pg_ctl", "-D", data, "-l", log, "-m", "immediate", "-w", "restart"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=60)
    nodes.store.close()  # this test's own connections died with the server
    nodes.wait_until(lambda: nodes.done(ids), timeout=60)
    _check(nodes, ids)


def test_four_nodes_declaring_the_same_startup_tasks_make_one_row_each(nodes: Nodes) -> None:
    from cadence.store import PostgresStore

    def declare() -> None:
        store = PostgresStore(nodes.dsn, prefix=nodes.prefix)
        try:
            s = DurableScheduler(store)
            for k in range(5):
                s.ensure(f"job{k}", FixedRate(60), EFFECT, args=[])
        finally:
            store.close()

    threads = [threading.Thread(target=declare) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.task_id for r in nodes.store.rows()) == [f"job{k}" for k in range(5)]
