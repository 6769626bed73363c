"""Instructions per operation of the core's hot paths, counted by callgrind.

Wall-clock figures on a shared machine drift by 10-20 %; instruction counts
do not (the same count for the same build, inputs and PYTHONHASHSEED, however
busy the machine), so they show small changes that timing cannot. Used to
check that a change leaves the default hot paths no slower.

Usage: ``python bench/instructions.py [SRC ...]`` where each SRC is a
``src`` directory holding a ``rota`` package (default: this checkout's);
e.g. ``git worktree add /tmp/old REV`` then
``python bench/instructions.py /tmp/old/src src``. Needs valgrind.

Each in-memory workload runs 20,000 operations in a fresh interpreter with GC
off; the figure is (instructions of the run - instructions of its baseline) /
20,000. The durable run drains 3,000 due no-op runs from a SQLite file
(NORMAL) through a Runner with group commit, GC on as users run it, against a
baseline that stores the same rows a day ahead and starts and stops the
Runner: every thread's instructions count, SQLite's included. The same drain
with a ``rota.metrics.Collector`` attached (a node serving ``/metrics``)
prices the run counters; so do the same two by ``tick()`` on one thread, whose
counts move less from run to run (about 0.7 %) than the Runner's threads' do
(about 2.4 %).

Two floors go beside them: the statements that same Runner drain sent (traced on
every connection, parameters as bound), replayed in order on one connection, with
nothing between them, after the statements that made and seeded its file (the
baseline replays only those); and that replay with each
claimed row's state decoded and encoded again by the store's codec, as a claim and
a completion do. That is what any Python code pays to run this schema's runs
before it decides anything (the sqlite3 module, SQLite, JSON); a durable run's
count minus it is what the scheduler, the runner and their threads add. The
statements are traced once per SRC by a native run of the first durable
workload; only the replay is counted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import machine

N = 20_000
WORKLOAD = r"""
import gc, random, sys
sys.path.insert(0, {src!r})
from rota import Scheduler
gc.disable()
N = {n}
rng = random.Random(1)
times = [rng.random() * 1000 for _ in range(N)]
def act(at): pass
s = Scheduler(clock=lambda: 0.0)
which = {which!r}
if which in ("schedule", "fire"):
    for i, t in enumerate(times): s.schedule_once(i, t, act)
    if which == "fire": s.tick(2000.0)
elif which in ("resident", "cancel", "idle"):
    for i, t in enumerate(times): s.schedule_once(i, 1e9 + t, act)
    if which == "cancel":
        for _ in range(N): s.schedule_once(-1, 5.0, act); s.cancel(-1)
    if which == "idle":
        for _ in range(N): s.tick(1.0)
elif which in ("rate", "rate-base"):
    s = Scheduler(clock=lambda: 0)
    for i in range(100): s.schedule_at_fixed_rate(i, i % 10, 10, act)
    if which == "rate": s.tick(N // 100 * 10 - 1)
"""
DURABLE_N = 3_000
DURABLE = r"""
import os, sys, tempfile, threading, time
sys.path.insert(0, {src!r})
from rota import FixedRate, Once, Runner
from rota.durable import DurableScheduler
from rota.store import SQLiteStore
N = {n}
store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "s.db"), synchronous="NORMAL")
s = DurableScheduler(store)
def noop(at): pass
s.register("noop", noop)
which = {which!r}
# due now for the drain; a day ahead for its baseline (the same rows, never run)
at = time.time() - 1 + (86_400 if which.endswith("-base") else 0)
# one-off tasks, or (bench/durable.py's drain) fixed-rate ones whose next slot is far
when = (lambda: FixedRate(10**9, start=at)) if "rate" in which else (lambda: Once(at=at))
for i in range(N): s.schedule(f"t{{i}}", when(), "noop")
if "metrics" in which:  # a node serving /metrics counts its own runs
    from rota.metrics import Collector
    collector = Collector(s)
if "tick" in which:  # one thread, no runner: the steadiest count
    if not which.endswith("-base"): assert len(s.tick(time.time())) == N
else:
    done, count = threading.Event(), [0]
    def seen(outcome):
        count[0] += 1
        if count[0] == N: done.set()
    with Runner(s, on_outcome=seen):
        if not which.endswith("-base"): assert done.wait(600)
"""
# The floor under a durable run: the statements the "durable" drain sent (traced
# on every connection, parameters as bound), replayed in order on one connection
# with no scheduler between them, and with each claimed row's state decoded and
# encoded again as a completion writes it. What any Python code running this
# schema's runs pays (sqlite3 binding and fetching, SQLite, the json module's C
# code) before deciding anything; the drain minus it is what rota adds.
TRACE = r"""
import pickle, sqlite3, sys, threading
sys.path.insert(0, {src!r})
import rota
traced, order, marks = [], threading.Lock(), []
class Tracing(sqlite3.Connection):
    def execute(self, sql, parameters=()):
        cursor = super().execute(sql, parameters)  # (what failed, a probe, is not replayed)
        if not sql.startswith("PRAGMA"):
            with order:
                traced.append((sql, tuple(parameters)))
        return cursor
connect = sqlite3.connect
sqlite3.connect = lambda *a, **k: connect(*a, factory=Tracing, **k)
start = rota.Runner.start
def marked(runner):  # where the file is made and seeded, and the drain begins
    marks.append(len(traced))
    start(runner)
rota.Runner.start = marked
{durable}
store.close()
with open({out!r}, "wb") as f: pickle.dump((traced, marks[0]), f)
"""
REPLAY = r"""
import os, pickle, sqlite3, sys, tempfile
sys.path.insert(0, {src!r})
from rota.store._base import _decode as decode, _encode as encode  # the store's codec
which = {which!r}
with open({out!r}, "rb") as f: traced, mark = pickle.load(f)
db = sqlite3.connect(os.path.join(tempfile.mkdtemp(), "s.db"), isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
claimed = []
# the baseline makes and seeds the file; the drain's statements come after
for sql, parameters in traced[: mark if which.endswith("-base") else None]:
    found = db.execute(sql, parameters).fetchall()
    if sql.startswith("UPDATE") and "RETURNING task_id, action" in sql:
        claimed += found
if "json" in which:  # a claim reads each state, its completion writes it back
    for row in claimed: encode(decode(row[3]))
done = db.execute("SELECT count(*) FROM rota_outcomes").fetchone()[0]
assert done == (0 if which.endswith("-base") else {n}), done
"""
# workload -> (its baseline, what one operation is)
WORKLOADS = {
    "schedule": ("none", "schedule_once"),
    "fire": ("schedule", "tick: run one one-off task"),
    "cancel": ("resident", "schedule_once + cancel, 20,000 resident"),
    "idle": ("resident", "idle tick, 20,000 resident"),
    "rate": ("rate-base", "tick: one fixed-rate run"),
    "durable": ("durable-base", "durable run: Runner, SQLite NORMAL, group commit"),
    "durable-metrics": ("durable-metrics-base", "the same, counting its runs for /metrics"),
    "durable-rate": ("durable-rate-base", "durable run of a fixed-rate task (bench/durable.py)"),
    "durable-tick": ("durable-tick-base", "durable run by tick(): one thread, a commit per run"),
    "durable-tick-metrics": ("durable-tick-metrics-base", "the same, counting its runs"),
    "durable-sql": ("durable-sql-base", "floor: the durable run's own SQL, replayed"),
    "durable-sql-json": ("durable-sql-base", "floor: that SQL and its state's JSON"),
}


def instructions(src: str, which: str) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if which.startswith("durable-sql"):
        code = REPLAY.format(src=src, out=_traced(src, env), n=DURABLE_N, which=which)
    elif which.startswith("durable"):
        code = DURABLE.format(src=src, n=DURABLE_N, which=which)
    else:
        code = WORKLOAD.format(src=src, n=N, which=which)
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    match = re.search(r"Collected : (\d+)", out.stderr)
    assert match, out.stderr[-2000:]
    return int(match.group(1))


_TRACES: dict[str, str] = {}


def _traced(src: str, env: dict[str, str]) -> str:
    """A file holding the statements ``src``'s "durable" workload sent, and where its
    drain began (run once per SRC, natively: only their replay is counted)."""
    if src not in _TRACES:
        out = tempfile.mkdtemp(prefix="rota-trace-")
        durable = DURABLE.format(src=src, n=DURABLE_N, which="durable")
        code = TRACE.format(src=src, durable=durable, out=os.path.join(out, "trace.pickle"))
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        _TRACES[src] = out
    return os.path.join(_TRACES[src], "trace.pickle")


def main(argv: list[str]) -> None:
    srcs = argv or [str(Path(__file__).resolve().parent.parent / "src")]
    counts: dict[str, dict[str, int]] = {src: {} for src in srcs}
    names = sorted(set(WORKLOADS) | {base for base, _ in WORKLOADS.values()})
    try:
        for src in srcs:
            for which in names:
                counts[src][which] = instructions(src, which)
                print(f"{src}: {which} done", file=sys.stderr)
    finally:
        for directory in _TRACES.values():
            shutil.rmtree(directory)
    head = "| operation | " + " | ".join(srcs) + " |"
    lines = [head, "|---|" + "---|" * len(srcs)]
    for which, (base, label) in WORKLOADS.items():
        per = DURABLE_N if which.startswith("durable") else N
        cells = [f"{(counts[s][which] - counts[s][base]) / per:,.0f}" for s in srcs]
        if len(srcs) == 2:
            a, b = ((counts[s][which] - counts[s][base]) for s in srcs)
            cells[-1] += f" ({100 * (b - a) / a:+.1f} %)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = "instructions per operation (callgrind, PYTHONHASHSEED=0)\n\n" + "\n".join(lines)
    print(text)
    out = Path(__file__).parent / "results" / "instructions.md"
    command = "python bench/instructions.py " + " ".join(argv)
    out.write_text(f"Command: `{command}`\n\nMachine: {machine()}\n\n{text}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
