"""The command's tests' fixture: a directory with a job file and a store, and the
``rota`` subcommands run in it as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Cli:
    """Runs ``rota`` subcommands in a directory with one job file and one store."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self.jobs = tmp / "jobs.toml"
        self.store = f"sqlite:///{tmp / 'state.db'}"
        self.procs: list[subprocess.Popen[str]] = []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp / "out")}

    def write(self, text: str) -> None:
        self.jobs.write_text(text)

    def start(
        self, *extra: str, live: bool = False, log: Path | None = None
    ) -> subprocess.Popen[str]:
        """``rota run`` on the job file; its stderr to ``log`` if given (to read while
        it runs), else a pipe."""
        env = {**self.env, "COLUMNS": "200", "FORCE_COLOR": "0"} if live else self.env
        err: Any = subprocess.PIPE if log is None else log.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "rota", "run", str(self.jobs), "--store", self.store,
             "--live", "yes" if live else "no", *extra],
            cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
        if log is not None:
            err.close()  # the child has its own copy
        self.procs.append(proc)
        return proc

    def live(self, seconds: float) -> str:
        """``rota run`` with its live view for ``seconds``, then SIGTERM: what it
        drew and logged (stderr); it must exit 0."""
        proc = self.start(live=True)
        time.sleep(seconds)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        return err

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rota", *args, "--store", self.store],
            cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def json(self, *args: str) -> Any:
        done = self(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def loaded(self) -> bool:
        """Whether the store exists and holds a task (``status`` refuses a store that
        does not exist yet, exit 2: until ``run`` created it)."""
        done = self("status", "--json")
        return done.returncode == 0 and json.loads(done.stdout) != []

    def lines(self) -> list[str]:
        out = self.dir / "out"
        return out.read_text().splitlines() if out.exists() else []

    def wait(self, done: Callable[[], bool], timeout: float = 20) -> None:
        wait_until(done, timeout)

    def kill_all(self) -> None:
        """Kill every process it started that still runs, and reap them all."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path)
    try:
        yield c
    finally:
        c.kill_all()


def _task(cli: Cli, task_id: str) -> dict[str, Any]:
    """The task's ``status --json`` entry; empty until it is stored (before ``run``
    created the store, ``status`` refuses it)."""
    done = cli("status", "--json")
    if done.returncode != 0:
        return {}
    return next((t for t in json.loads(done.stdout) if t["id"] == task_id), {})
