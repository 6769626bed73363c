"""Worker processes sharing one durable schedule, and what they did (for fault tests).

The workers (``worker.py``) run ``jobs.effect``, which writes a line per start
and an effect keyed by the slot; a test injects faults and then checks, through
:class:`Cluster`: no slot lost, each run completed once, duplicate starts only
for runs in flight on processes that lost their lease.
"""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from rota import DurableScheduler, FixedRate, Misfire, Overlap, Pool, Status
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
EFFECT = "tests.durable.jobs:effect"


class Cluster:
    """Workers on ``target`` (a SQLite file, or ``pg:PREFIX``), seen through ``sched``."""

    def __init__(
        self, tmp: Path, target: str, sched: DurableScheduler, env: dict[str, str] | None = None
    ) -> None:
        self.target, self.sched = target, sched
        self.effects = str(tmp / "effects.db")
        # Made before any worker starts, so a reader never meets the file without it.
        with sqlite3.connect(self.effects) as db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, pid INTEGER)")
        db.close()
        self.env = {**os.environ, "EFFECTS_DB": self.effects, "PYTHONPATH": str(ROOT),
                    **(env or {})}  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def spawn(self, **env: str) -> subprocess.Popen[bytes]:
        log = Path(self.effects).with_name(f"worker-{len(self.procs)}.log")
        with open(log, "wb") as err:  # (the child keeps its own descriptor)
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.durable.worker", self.target],
                cwd=ROOT, env={**self.env, **env}, stderr=err,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        """What the workers wrote to stderr (warnings, errors), the last lines of each."""
        parts = []
        for i in range(len(self.procs)):
            log = Path(self.effects).with_name(f"worker-{i}.log")
            text = log.read_text(errors="replace") if log.exists() else ""
            parts.append(f"--- worker {i}:\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.kills += 1

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            proc.wait(30)

    def done(self, ids: list[str]) -> bool:
        return all(self.sched.status(i) is Status.DONE for i in ids)

    def effect_keys(self) -> set[str]:
        db = sqlite3.connect(self.effects, timeout=30)
        try:
            return {key for (key,) in db.execute("SELECT key FROM effects")}
        finally:
            db.close()

    def starts(self) -> Counter[str]:
        path = self.effects + ".starts"
        if not os.path.exists(path):
            return Counter()
        with open(path) as f:
            return Counter(line.split()[0] for line in f if line.strip())

    def completions(self) -> Counter[tuple[str, object, int]]:
        """Recorded outcomes per (task, slot, attempt): each must be 1."""
        store = self.sched.store
        return Counter(
            (o.task_id, o.slot, o.attempt)
            for row in store.rows()
            for o in store.outcomes(row.task_id, 10**6)
        )

    def check(self, ids: list[str]) -> None:
        """0 duplicate completions, 0 lost slots (every task's effect is there)."""
        assert all(count == 1 for count in self.completions().values())
        keys = {f"{i}@{self.sched.history(i)[0].slot!r}" for i in ids}
        assert self.effect_keys() == keys

    def downtime(self, period: float = 0.3) -> None:
        """All workers down for ten periods, then two restarted: catch-up runs each
        missed slot once, coalesce runs one for all the slots due by then (skipped =
        those before it: 9 or more, as workers take a moment to start), skip runs none
        and reports them on its next run."""
        for name, misfire in [("catch", None), ("coalesce", Misfire.COALESCE),
                              ("skip", Misfire.SKIP)]:  # fmt: skip
            self.sched.schedule_at_fixed_rate(name, 0.2, period, EFFECT, args=[], misfire=misfire)
        time.sleep(0.2 + 10 * period + 0.05)  # slots 0..9 (ten) pass with nothing running
        first = {row.task_id: row.due for row in self.sched.store.rows()}
        workers = [self.spawn(LEASE="1") for _ in range(2)]

        def caught_up() -> bool:  # however long the workers take to start (a loaded host)
            runs = {name: self.sched.history(name, 100) for name in first}
            return len(runs["catch"]) >= 10 and bool(runs["coalesce"]) and bool(runs["skip"])

        deadline = time.monotonic() + 60
        while not caught_up():
            assert time.monotonic() < deadline, f"not caught up in 60 s\n{self.logs()}"
            time.sleep(0.05)
        for worker in workers:
            worker.terminate()
            worker.wait(10)
        history = {name: self.sched.history(name, 100)[::-1] for name in first}
        catch = [o.slot for o in history["catch"]]
        assert catch[:10] == [first["catch"] + k * period for k in range(10)]  # each missed
        assert len(catch) == len(set(catch))  # once
        coalesce = history["coalesce"]
        missed = round((coalesce[0].slot - first["coalesce"]) / period)  # due before it
        assert coalesce[0].skipped == missed >= 9  # one run for all that were due
        assert len({o.slot for o in coalesce}) == len(coalesce)
        assert history["skip"][0].skipped >= 10
        assert all(n == 1 for n in self.completions().values())

    def backfill_with_a_kill(self) -> None:
        """A backfill of 40 hourly slots, half of whose first attempts fail, run by two
        nodes, one SIGKILLed mid-run and replaced: every slot's effect once, each
        (slot, attempt) recorded once, the live schedule not moved, duplicate starts
        only for the run in flight on the killed node."""
        period = 3600.0
        first = (time.time() // period + 1) * period  # the live schedule: the next hour
        self.sched.schedule("bf", FixedRate(period, start=first), EFFECT, args=[], max_retries=2)
        queued = self.sched.backfill("bf", first - 41 * period, first - period)
        assert queued == 40  # the 40 hours before the last one, all past
        slots = [first - k * period for k in range(41, 1, -1)]
        env = {"LEASE": "1", "EFFECT_SLEEP": "0.05", "EFFECT_FAIL_FIRST": str(period)}
        nodes = [self.spawn(**env) for _ in range(2)]
        deadline = time.monotonic() + 60
        while len(self.effect_keys()) < 10:  # mid-backfill
            assert time.monotonic() < deadline, f"the backfill did not start\n{self.logs()}"
            time.sleep(0.02)
        self.kill(nodes[0])
        nodes[0] = self.spawn(**env)
        keys = {f"bf@{slot!r}" for slot in slots}
        while self.effect_keys() != keys:
            assert time.monotonic() < deadline, f"not backfilled in 60 s\n{self.logs()}"
            time.sleep(0.05)
        for node in nodes:
            node.terminate()
            node.wait(30)
        assert all(n == 1 for n in self.completions().values())
        done = [o for o in self.sched.history("bf", 1000) if o.result in ("ok", "failed")]
        assert sorted(o.slot for o in done) == slots  # each slot once, none twice
        assert self.sched.next_run_time("bf") == first  # the live schedule did not move
        retried = sum(1 for slot in slots if round(slot / period) % 2 == 0)
        again = sum(self.starts().values()) - len(slots) - retried
        assert 0 <= again <= self.kills  # only the run in flight on the killed node

    def overlap_with_a_kill(self) -> None:
        """A task under ``Overlap.allow(3)`` whose runs last three of its periods, on two
        nodes with pools: the node holding it is SIGKILLed with runs in flight and
        replaced. Its runs in flight run again on the other node (same keys), no more
        than three runs are ever recorded in flight at once, every slot's effect is
        there once, each (slot, attempt) is recorded once, duplicate starts only for
        the runs in flight on the killed node."""
        period = 0.1
        start = time.time() // 1 + 1
        self.sched.schedule(
            "ov", FixedRate(period, start=start), EFFECT, args=[],
            overlap=Overlap.allow(3), max_runs=40,
        )  # fmt: skip
        env = {"LEASE": "1", "EFFECT_SLEEP": str(3 * period), "WORKERS": "4"}
        nodes = [self.spawn(**env) for _ in range(2)]
        deadline = time.monotonic() + 90
        owner: str | None = None
        while len(self.effect_keys()) < 10 or owner is None:
            assert time.monotonic() < deadline, f"the task did not start\n{self.logs()}"
            time.sleep(0.01)
            row = self.sched.store.get("ov")
            owner = None if row is None else row.owner
        holder = next(n for n in nodes if f":{n.pid}:" in owner)
        self.kill(holder)
        nodes[nodes.index(holder)] = self.spawn(**env)
        while not self.done(["ov"]):
            assert time.monotonic() < deadline, f"not done in 90 s\n{self.logs()}"
            time.sleep(0.05)
        for node in nodes:
            node.terminate()
            node.wait(30)
        assert all(n == 1 for n in self.completions().values())
        done = [o for o in self.sched.history("ov", 1000) if o.result == "ok"]
        slots = sorted(o.slot for o in done)
        assert slots == [start + k * period for k in range(40)]  # each slot once
        assert self.effect_keys() == {f"ov@{slot!r}" for slot in slots}
        ends = sorted([(o.started, 1) for o in done] + [(o.finished, -1) for o in done])
        most = max(itertools.accumulate(step for _, step in ends))
        assert 2 <= most <= 3  # runs overlapped, never more than three at once
        again = sum(self.starts().values()) - len(slots)
        assert 0 <= again <= 3  # only the runs in flight on the killed node (three at most)

    def pool_with_a_kill(self) -> None:
        """Six tasks in a pool of two, their runs lasting longer than their period, on
        three nodes with room for four runs each: the node holding a place is
        SIGKILLed mid-run and replaced. Never more than two runs of the pool are
        recorded in flight at once (across nodes); the dead node's place frees when
        its lease is taken over; each slot is recorded once, its effect there once."""
        period, runs = 0.1, 5
        start = time.time() // 1 + 1
        pool = Pool("warehouse", 2)
        ids = [f"load{i}" for i in range(6)]
        for name in ids:
            self.sched.schedule(
                name, FixedRate(period, start=start), EFFECT, args=[], max_runs=runs, pool=pool
            )
        env = {"LEASE": "1", "EFFECT_SLEEP": "0.15", "WORKERS": "4"}
        nodes = [self.spawn(**env) for _ in range(3)]
        deadline = time.monotonic() + 120
        holder = None
        while holder is None:
            assert time.monotonic() < deadline, f"no run started\n{self.logs()}"
            time.sleep(0.01)
            owners = [row.owner for row in self.sched.store.rows() if row.owner]
            holder = next((n for n in nodes for o in owners if f":{n.pid}:" in o), None)
        self.kill(holder)
        nodes[nodes.index(holder)] = self.spawn(**env)
        while not self.done(ids):
            assert time.monotonic() < deadline, f"not done in 120 s\n{self.logs()}"
            time.sleep(0.05)
        for node in nodes:
            node.terminate()
            node.wait(30)
        assert all(n == 1 for n in self.completions().values())
        done = [o for i in ids for o in self.sched.history(i, 1000) if o.result == "ok"]
        assert len(done) == 6 * runs
        assert self.effect_keys() == {f"{o.task_id}@{o.slot!r}" for o in done}
        ends = sorted([(o.started, 1) for o in done] + [(o.finished, -1) for o in done])
        assert max(itertools.accumulate(step for _, step in ends)) == 2  # full, never more
        assert self.sched.store.pools() == {"warehouse": (2, 0)}

    def rolling_deploy(self) -> None:
        """A rolling deploy: tasks of an action only the new version registers wait,
        untouched, beside an old node (which runs the rest); a new node runs them.
        Nothing is deleted; no task of the new action is started on the old node."""
        new = "deploy.effect"  # the name the new version registers
        self.sched.register(new, _effect)
        old_ids, new_ids = [f"old{i}" for i in range(5)], [f"new{i}" for i in range(5)]
        for task_id in old_ids:
            self.sched.schedule_once(task_id, 0, EFFECT, args=[])
        for task_id in new_ids:
            self.sched.schedule_once(task_id, 0, new, args=[])
        old = self.spawn(LEASE="1")
        time.sleep(0.5)
        deadline = time.monotonic() + 20
        while not self.done(old_ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the old node has had every chance to touch the new tasks
        untouched = {row.task_id: row for row in self.sched.store.rows() if row.action == new}
        assert sorted(untouched) == new_ids  # nothing deleted
        assert all(r.status == "scheduled" and r.fence == 0 for r in untouched.values())
        assert not any(self.sched.history(i) for i in new_ids)
        newer = self.spawn(LEASE="1", ACTIONS=f"{new}={EFFECT}")
        deadline = time.monotonic() + 20
        while not self.done(new_ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.check(old_ids + new_ids)
        owners = {i: self.sched.history(i)[0].owner or "" for i in old_ids + new_ids}
        assert all(str(old.pid) in owners[i] for i in old_ids)
        assert all(str(newer.pid) in owners[i] for i in new_ids)
        assert all(n == 1 for n in self.starts().values())  # no fault: no duplicate start

    def upstream_killed(self) -> None:
        """``down`` waits for ``up``'s same slot; two workers, the one running an ``up`` run
        SIGKILLed (its lease taken over): no ``down`` run starts before its ``up`` run
        ended ok, none runs twice, and every ``down`` slot ran or was counted skipped."""
        start = time.time() + 0.5
        self.sched.schedule("up", FixedRate(0.3, start=start), EFFECT, args=[])
        self.sched.schedule("down", FixedRate(0.3, start=start), EFFECT, args=[], after="up")
        env = {"LEASE": "1", "EFFECT_SLEEP": "0.1"}
        workers = [self.spawn(**env) for _ in range(2)]
        wait_until(lambda: any(key.startswith("up@") for key in self.starts()), timeout=20)
        time.sleep(0.6)
        holder = {row.owner for row in self.sched.store.rows() if row.task_id == "up"}
        victim = next(
            (w for w in workers if any(str(w.pid) in str(o) for o in holder)), workers[0]
        )
        self.kill(victim)
        self.spawn(**env)
        time.sleep(3)
        self.stop_all()
        store = self.sched.store
        ups = {o.slot: o for o in store.outcomes("up", 10**6) if o.result == "ok"}
        downs = store.outcomes("down", 10**6)
        assert all(n == 1 for n in self.completions().values())  # none twice
        assert len(downs) >= 5
        for o in downs:
            assert o.result == "ok"
            assert o.slot in ups  # the same slot of up ended ok
            assert o.started is not None
            assert ups[o.slot].finished <= o.started  # and before this one started
        last = max(o.slot for o in downs)
        slots = round((last - start) / 0.3) + 1
        skipped = sum(o.skipped for o in downs)
        assert len(downs) + skipped == slots  # every slot up to the last ran or was counted


def _effect() -> None:
    """Stands for the new version's function in the scheduling process (never run here)."""
