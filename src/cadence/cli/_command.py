"""Command jobs: a child process per run, in its own process group.

The run's facts reach the command as environment variables (pinned in
``docs/cli.md``): ``CADENCE_TASK_ID``, ``CADENCE_SLOT`` (``repr(float)``),
``CADENCE_ATTEMPT``, ``CADENCE_KEY``. A non-zero exit, a signal or the
timeout fails the run (the whole group is killed on timeout and on
shutdown); the tail of the output is kept with the outcome.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

from cadence._calls import RunContext

TAIL = 2000
"""Characters of a command's combined stdout/stderr kept with its outcome."""

KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL of a command's process group."""

_running: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


class CommandError(Exception):
    """A command exited non-zero, was killed, or ran past its timeout."""


def run_command(command: str | list[str], timeout: float | None, *, run: RunContext) -> str:
    """Run ``command`` (argv list, or a string for the shell) for one run; return its tail.

    Raises :class:`CommandError`, with the output's tail, when it fails.
    """
    env = {
        **os.environ,
        "CADENCE_TASK_ID": str(run.task_id),
        "CADENCE_SLOT": repr(float(run.slot)),
        "CADENCE_ATTEMPT": str(run.attempt),
        "CADENCE_KEY": f"{run.task_id}@{float(run.slot)!r}",
    }
    proc = subprocess.Popen(
        command,
        shell=isinstance(command, str),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed as a whole
    )
    with _lock:
        _running.add(proc)
    try:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            raise CommandError(
                f"timed out after {timeout:g}s (process group killed); output:\n{_tail(out)}"
            ) from None
    finally:
        with _lock:
            _running.discard(proc)
    tail = _tail(out)
    if proc.returncode != 0:
        how = (
            f"killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        raise CommandError(f"{how}; output:\n{tail}")
    return tail


def _tail(out: bytes | None) -> str:
    text = (out or b"").decode(errors="replace")
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(proc.pid, signal.SIGKILL)


def stop_all(grace: float = KILL_GRACE) -> None:
    """Shutdown: SIGTERM every running command's group, SIGKILL what is left after ``grace``."""
    with _lock:
        procs = list(_running)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
