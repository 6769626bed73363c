"""The functions one durable run passes through, from its claim to its commit.

Usage: ``python bench/trace.py [SRC ...]``, each SRC a ``src`` directory holding a
``rota`` package (default: this checkout's); e.g. ``git worktree add /tmp/old REV``
then ``python bench/trace.py /tmp/old/src src``.

The path is the one a ``Runner`` without a pool takes with group commit, on a
SQLite file, in the steady state (the process's second run of a spec, so no policy
is decoded and no engine built): the claim, the triage of the claimed row, the call
of the action, the completion decided and left to linger, then the next claim,
which commits it in its own transaction. It is driven here on one thread through the
table a runner drives (``Scheduler.table``; before issue 43, the scheduler's private
``_claim``/``_complete_later``), so what is counted is the scheduler's, the store's
and the engine's part of a run: every Python function called (``sys.setprofile``),
the distinct ones, and the modules they are in. C functions (SQLite, json) are not
counted; the runner's own loop is not either (it is the same before and after).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = r"""
import os, sys, tempfile, time
sys.path.insert(0, {src!r})
from rota import FixedRate
from rota.durable import DurableScheduler
from rota.store import SQLiteStore

store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "s.db"), synchronous="NORMAL")
sched = DurableScheduler(store)
def noop(at): pass
sched.register("noop", noop)
now = time.time()
for i in range(4):  # the same spec: the second run decodes nothing
    sched.schedule(f"t{{i}}", FixedRate(10**9, start=now - 1), "noop")
table = getattr(sched, "table", None)
if table is not None:
    claim, call, later = table.claim, table.call, table.complete_later
else:  # before issue 43: the scheduler's private primitives
    claim, call, later = sched._claim, sched._call, sched._complete_later
reported = []

def run_one(trace):
    if trace: sys.setprofile(profile)
    task = claim(time.time(), room=None)
    error = call(task)
    at = time.time()
    later(task, error, at, at, reported.append, linger=True)
    claim(time.time(), room=None)  # commits the lingering completion with its claim
    sys.setprofile(None)

calls, seen = [], set()
def profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        calls.append(code)

run_one(False)  # the first run: policies decoded, an engine built
calls.clear()
run_one(True)  # the steady state
mine = [c for c in calls if "rota" in c.co_filename]
distinct = {{(c.co_filename, c.co_firstlineno, c.co_name) for c in mine}}
modules = {{c.co_filename for c in mine}}
print(len(mine), len(distinct), len(modules))
"""


def measure(src: str) -> tuple[int, int, int]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as here:
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(src=src)],
            capture_output=True, text=True, env=env, check=True, cwd=here,
        )  # fmt: skip
    calls, distinct, modules = map(int, out.stdout.split())
    return calls, distinct, modules


def main(argv: list[str]) -> None:
    srcs = argv or [str(Path(__file__).resolve().parent.parent / "src")]
    print("one durable run, claim -> commit (steady state, one thread)\n")
    print("| src | calls | distinct functions | modules |")
    print("|---|---|---|---|")
    for src in srcs:
        calls, distinct, modules = measure(src)
        print(f"| {src} | {calls} | {distinct} | {modules} |")


if __name__ == "__main__":
    main(sys.argv[1:])
