"""SIGINT barrages against hot loops, in child processes, bounded in time (#2).

A KeyboardInterrupt may land between any two bytecodes of the main thread. A
child process runs schedule/cancel/tick (or a Runner) in a loop while this
test sends it SIGINTs; afterwards the child checks that no lock leaked, the
engine's invariants hold, no task is stuck and the scheduler still runs
everything. The child's own handler raises KeyboardInterrupt exactly as the
default one does, but disarms itself until the loop catches it, so the test
never dies of an interrupt landing in its own bookkeeping.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

BARRAGE = r"""
import signal, sys, threading
from rota import ManualClock, Scheduler, Status
from rota.misfire import Misfire
from rota.schedules import FixedRate

armed = False  # armed only inside the loop's try: an interrupt elsewhere is ignored
def handler(signum, frame):
    global armed
    if armed:
        armed = False
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, handler)

stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
clock = ManualClock(0)
s = Scheduler(clock=clock)
def act(at):
    if at % 5 == 0:
        raise ValueError(at)
interrupts = ops = 0
print("ready", flush=True)
while not stop.is_set():
    try:
        armed = True
        for _ in range(200):
            ops += 1
            s.schedule_once(ops % 64, ops % 7, act, max_retries=ops % 2)
            s.cancel((ops + 17) % 64)
            s.schedule(("rate", ops % 8), FixedRate(3), act, misfire=Misfire.COALESCE)
            s.cancel(("rate", (ops + 3) % 8))
            clock.advance(1)
            s.tick(clock())
        armed = False
    except KeyboardInterrupt:
        interrupts += 1
signal.signal(signal.SIGINT, signal.SIG_IGN)
got = []
take = lambda: got.append(s.table.lock.acquire(timeout=5) and s.table.lock.release())
probe = threading.Thread(target=take)
probe.start(); probe.join()
assert got == [None], "the scheduler lock leaked"  # another thread could take it
s.table.engine._check()
ids = [*range(64), *(("rate", i) for i in range(8))]
for i in ids:
    assert s.status(i) not in (Status.QUEUED, Status.RUNNING), (i, s.status(i))
for i in range(8):
    s.cancel(("rate", i))
s.tick(clock() + 10**6)
for i in range(64):
    assert s.status(i) in (None, Status.DONE, Status.FAILED, Status.CANCELLED), (i, s.status(i))
assert s.next_run_time() is None
s.schedule_once("witness", 0, act)
assert [o.task_id for o in s.tick(clock() + 10**6 + 1)] == ["witness"]
s.table.engine._check()
print("ok", interrupts, ops, flush=True)
"""

RUNNER = r"""
import time
from rota import Runner, Scheduler
s = Scheduler()
def act(at):
    pass
i = 0
try:
    with Runner(s):
        print("ready", flush=True)
        while True:
            i += 1
            s.schedule_once(i % 100, 0, act)
            s.cancel((i + 1) % 100)
except KeyboardInterrupt:
    print("exited", flush=True)
"""


def child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the child hung; stderr: {err[-2000:]}")
    assert proc.returncode == 0, err[-3000:]
    return out


def test_a_sigint_barrage_against_schedule_cancel_tick_leaks_nothing() -> None:
    proc = child(BARRAGE)
    try:
        barrage(proc)
    finally:
        proc.kill()
        proc.wait()


def barrage(proc: subprocess.Popen[str]) -> None:
    for _ in range(400):
        if proc.poll() is not None:
            break  # it died: finish() shows why
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.002)
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write("stop\n")
        proc.stdin.flush()
    verdict = finish(proc, timeout=120).split()
    assert verdict[0] == "ok"
    assert int(verdict[1]) >= 100  # interrupts that landed inside the hot loop


def test_one_ctrl_c_inside_with_runner_always_exits() -> None:
    procs: list[subprocess.Popen[str]] = []
    try:
        procs += [child(RUNNER) for _ in range(12)]
        for proc in procs:
            time.sleep(0.01)
            os.kill(proc.pid, signal.SIGINT)
        for proc in procs:
            assert finish(proc, timeout=60).strip() == "exited"
    finally:  # a failure leaves no child spinning (they loop until interrupted)
        for proc in procs:
            proc.kill()
            proc.wait()
