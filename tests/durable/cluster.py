"""Worker processes sharing one durable schedule, and what they did (for fault tests).

The workers (``worker.py``) run ``jobs.effect``, which writes a line per start
and an effect keyed by the slot; a test injects faults and then checks, through
:class:`Cluster`: no slot lost, each run completed once, duplicate starts only
for runs in flight on processes that lost their lease.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cadence import DurableScheduler, Status

ROOT = Path(__file__).resolve().parents[2]
EFFECT = "tests.durable.jobs:effect"


class Cluster:
    """Workers on ``target`` (a SQLite file, or ``pg:PREFIX``), seen through ``sched``."""

    def __init__(
        self, tmp: Path, target: str, sched: DurableScheduler, env: dict[str, str] | None = None
    ) -> None:
        self.target, self.sched = target, sched
        self.effects = str(tmp / "effects.db")
        self.env = {**os.environ, "EFFECTS_DB": self.effects, "PYTHONPATH": str(ROOT),
                    **(env or {})}  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def spawn(self, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.durable.worker", self.target],
            cwd=ROOT, env={**self.env, **env}, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

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
        if not os.path.exists(self.effects):
            return set()
        db = sqlite3.connect(self.effects)
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
