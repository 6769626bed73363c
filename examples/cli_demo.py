"""The ``rota`` command, shown: plan, run, a kill -9 and a restart, status, history.

``python examples/cli_demo.py`` (what ``make demo`` ends with, about twenty
seconds) runs each command as you would type it, against a scratch store.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "examples" / "jobs.toml"


def rota(*args: str) -> list[str]:
    """The command line for ``rota ARGS`` (this interpreter's, so it works from a venv)."""
    return [sys.executable, "-m", "rota", *args]


def show(*args: str) -> None:
    print(f"\n$ rota {shlex.join(args)}", flush=True)
    subprocess.run(rota(*args), check=True, timeout=60)


def main() -> None:
    store = f"sqlite:///{tempfile.mkdtemp(prefix='rota-cli-')}/demo.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    print("1. What will run, and when? A dry run in virtual time, touching nothing:")
    show("plan", str(JOBS), "--until", "+8s")

    print("\n2. Run the file (log lines: one per run), then kill -9 it mid-flight:")
    run = [*rota("run", str(JOBS), "--store", store, "--live", "no")]
    print(f"$ rota run {JOBS.name} --store {store} &")
    first = subprocess.Popen(run, env=env)
    time.sleep(6)
    first.send_signal(signal.SIGKILL)
    first.wait()
    print(f"$ kill -9 {first.pid}   # no goodbye, no cleanup")
    time.sleep(3)

    print("\n3. Start it again: missed slots are caught up (or coalesced), none is lost:")
    second = subprocess.Popen(run, env=env)
    time.sleep(5)
    second.send_signal(signal.SIGTERM)
    second.wait(60)
    print(
        f"$ kill -TERM {second.pid}   # graceful: waits for runs in flight; "
        f"exit {second.returncode}"
    )

    print("\n4. What happened:")
    show("status", "--store", store)
    show("history", "flaky", "--store", store, "--limit", "6")


if __name__ == "__main__":
    main()
