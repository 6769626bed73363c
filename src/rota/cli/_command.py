"""Command jobs: a child process per run, in its own process group.

The run's facts reach the command as environment variables (pinned in
``docs/cli.md``): ``ROTA_TASK_ID``, ``ROTA_SLOT`` (``repr(float)``),
``ROTA_ATTEMPT``, ``ROTA_KEY``, ``ROTA_WINDOW_START``/``ROTA_WINDOW_END`` (the
window the run covers, ``repr(float)``). A non-zero exit, a signal or the
timeout fails the run (the whole group is killed on timeout); a command whose
job is cancelled, or whose run ``overlap = "replace"`` replaces, is ended the
same way (``RunCancelled``, not retried); a command the node's own shutdown
stops is given back, to run again with the same key
(:class:`~rota.durable.GivenBack`); the tail of the output is kept with
the outcome.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from rota import tracing
from rota._core.calls import RunContext
from rota._core.types import epoch_shown
from rota.durable import GivenBack, RunCancelled

TAIL = 2000
"""Characters of a command's combined stdout/stderr kept with its outcome."""

DRAIN = 2.0
"""Seconds a run waits, after its command exited, for the command's output to close
(held open by a descendant that left the process group) before it ends anyway."""

KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL of a command's process group."""

log = logging.getLogger("rota.cli")

_running: dict[subprocess.Popen[bytes], tuple[object, object]] = {}  # job id, run's time
_given_back: set[subprocess.Popen[bytes]] = set()  # stopped by stop_all
# Ended as its job was cancelled, or as Overlap.REPLACE replaced it: when, and which
_cancelled: dict[subprocess.Popen[bytes], tuple[float, str]] = {}
_lock = threading.Lock()


class CommandError(Exception):
    """A command exited non-zero, was killed, or ran past its timeout."""


BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""What a command that inherits nothing (``inherit_env = false``) still gets from the
node: enough to find programs and a home, nothing secret."""


def run_command(
    command: str | list[str],
    timeout: float | None,
    *,
    run: RunContext,
    env: dict[str, str] | None = None,
    inherit: bool | list[str] = True,
    cwd: str | None = None,
    log_output: bool | int = True,
) -> str:
    """Run ``command`` (argv list, or a string for the shell) for one run; return its tail.

    Each line it prints is logged (logger ``rota.output``, INFO) up to
    :data:`LOG_LINES` lines a run (``log_output`` true), up to that many
    (an int), or none (false); past the cap one line says how many were not.

    Its environment: the node's (``inherit`` true), only :data:`BASE_ENV`
    (false), or that and the names listed; then ``env``; then the run's facts. It
    runs in ``cwd`` (default: the node's working directory); a ``cwd`` that does
    not exist fails the run, saying so.

    The output is read as it comes and only its last :data:`TAIL` characters are
    kept, so memory stays flat whatever the command prints. The run ends when the
    command exits (or is killed at ``timeout``) and its output is closed, or
    :data:`DRAIN` seconds after that exit if a descendant that left the process
    group (``setsid``, a daemon) still holds the output open: nothing a command's
    descendants do can keep a run, or the node's shutdown, waiting.

    Raises :class:`CommandError`, with the output's tail, when it fails.
    """
    kept = (
        dict(os.environ)
        if inherit is True
        else {
            name: value
            for name, value in os.environ.items()
            if name in BASE_ENV or (isinstance(inherit, list) and name in inherit)
        }
    )
    start = run.window_start
    environment = {
        **kept,
        **(env or {}),
        "ROTA_TASK_ID": str(run.task_id),
        "ROTA_SLOT": repr(float(run.slot)),
        "ROTA_ATTEMPT": str(run.attempt),
        "ROTA_KEY": f"{run.task_id}@{float(run.slot)!r}",
        "ROTA_WINDOW_START": repr(float(run.slot if start is None else start)),
        "ROTA_WINDOW_END": repr(float(run.window_end)),
        **tracing.environ(),  # TRACEPARENT: the run's span, when tracing is on
    }
    try:
        proc = subprocess.Popen(
            command,
            shell=isinstance(command, str),
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killed as a whole
            cwd=cwd,
        )
    except OSError as exc:  # no such program or directory: the job's fault, said so
        what = command if isinstance(command, str) else command[0]
        where = "" if cwd is None else f" in {cwd!r}"
        raise CommandError(f"cannot start {what!r}{where}: {exc.strerror}") from None
    with _lock:
        _running[proc] = (run.task_id, run.at)
    try:
        timed_out = _collect(proc, timeout, tail := _Tail(), _Lines(run.task_id, log_output))
    finally:
        with _lock:
            _running.pop(proc, None)
            cancelled = _cancelled.pop(proc, (0, None))[1]
    text = tail.text()
    if cancelled:
        raise RunCancelled(
            f"{cancelled} while it ran: its process group was ended (exit status "
            f"{proc.returncode}); output:\n{text}"
        )
    if proc in _given_back:  # stopped by this node's shutdown (stop_all): not a failure
        _given_back.discard(proc)
        raise GivenBack(
            f"stopped by this node's shutdown before it finished (exit status "
            f"{proc.returncode}); given back, to run again"
        )
    if timed_out:
        raise CommandError(_failure(f"timed out after {timeout:g}s (process group killed)", text))
    if proc.returncode != 0:
        how = (
            f"killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        raise CommandError(_failure(how, text))
    return text


run_command.stoppable = True  # type: ignore[attr-defined]
"""A run can be stopped mid-run (its process group), as ``Overlap.REPLACE`` needs:
:func:`stop_replaced`, which ``rota run`` calls on ``RUN_REPLACED``."""


def _failure(how: str, output: str) -> str:
    """A failed command's message: how it ended and its output's last line, on the first
    line (what a log line shows); then the output's tail."""
    lines = output.strip().splitlines()
    if not lines:
        return f"{how} (no output)"
    return f"{how}: {lines[-1].strip()}\noutput:\n{output}"


LINE = 1000
"""Characters of one output line written to the log at most (the rest cut)."""

output_log = logging.getLogger("rota.output")
"""Each line a command prints, as it prints it, with its job (as supercronic does)."""


LOG_LINES = 1000
"""Lines of one run's output logged at most by default (``log_output = true``): a
chatty job wrote 400,000 lines (33 MB) in 70 s when every line was."""


class _Lines:
    """Splits a command's output into lines for :data:`output_log`, at most ``cap``
    of them a run (``True``: :data:`LOG_LINES`; ``False``: none); a partial line is
    kept (at most :data:`LINE` characters' worth) until its end arrives."""

    def __init__(self, job: object, cap: bool | int = True) -> None:
        self.job, self._partial = job, b""
        self._left = LOG_LINES if cap is True else int(cap)
        self._cap, self._dropped = self._left, 0

    def add(self, chunk: bytes) -> None:
        if not self._left and not self._cap:
            return  # log_output = false: nothing to split
        if not output_log.isEnabledFor(logging.INFO):
            return
        *lines, rest = (self._partial + chunk).split(b"\n")
        self._partial = rest[: 4 * LINE]
        for line in lines:
            self._log(line)

    def close(self) -> None:
        if self._partial:
            self._log(self._partial)
            self._partial = b""
        if self._dropped:
            output_log.info("job %r: %d more lines of this run were not logged (log_output "
                            "= %d)", self.job, self._dropped, self._cap,
                            extra={"job": str(self.job)})  # fmt: skip
            self._dropped = 0

    def _log(self, raw: bytes) -> None:
        if not self._left:
            self._dropped += 1
            return
        self._left -= 1
        text = raw.decode(errors="replace").rstrip("\r")
        if len(text) > LINE:
            text = text[:LINE] + "..."
        output_log.info("job %r: %s", self.job, text, extra={"job": str(self.job),
                                                                 "line": text})  # fmt: skip


class _Tail:
    """The last :data:`TAIL` characters' worth of a command's output (bytes kept: at
    most 4 x TAIL, UTF-8's widest), appended to in chunks. O(chunk) per append."""

    def __init__(self) -> None:
        self._kept = bytearray()
        self._cut = False

    def add(self, chunk: bytes) -> None:
        self._kept += chunk
        if len(self._kept) > 4 * TAIL:
            del self._kept[: len(self._kept) - 4 * TAIL]
            self._cut = True

    def text(self) -> str:
        text = self._kept.decode(errors="replace")
        if self._cut or len(text) > TAIL:
            return "..." + text[-TAIL:]
        return text


def _collect(
    proc: subprocess.Popen[bytes], timeout: float | None, tail: _Tail, lines: _Lines
) -> bool:
    """Read ``proc``'s output into ``tail`` until it exits and the output closes (at
    most :data:`DRAIN` seconds after the exit); kill its group at ``timeout``.
    Whether it timed out. Polls every 0.1 s at most; never blocks longer."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    ended: float | None = None  # when the command itself exited
    timed_out = False
    try:
        while True:
            now = time.monotonic()
            if ended is None and proc.poll() is not None:
                ended = now
            if ended is None and deadline is not None and now >= deadline:
                _kill_group(proc)
                proc.wait()
                ended, timed_out = time.monotonic(), True
            if ended is not None and now - ended >= DRAIN:
                log.warning(
                    "job %r: a process it started left its process group and still holds "
                    "its output open; no longer read (that process is left running)",
                    lines.job,
                )
                return timed_out
            if poller.poll(100):
                chunk = os.read(fd, 65536)
                if not chunk:  # every writer closed it
                    proc.wait()
                    return timed_out
                tail.add(chunk)
                lines.add(chunk)
    finally:
        lines.close()
        proc.stdout.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(proc.pid, signal.SIGKILL)


def stop_cancelled(cancelled: Callable[[str], bool], grace: float = KILL_GRACE) -> None:
    """End the commands whose jobs were cancelled (``cancelled(job_id)``, from any
    process; a job its file no longer declares is not: its run in flight finishes):
    SIGTERM to the process group, SIGKILL once
    ``grace`` seconds passed without it ending. Their runs end in
    :class:`~rota.durable.RunCancelled`, recorded as ``cancelled``. Called often
    (``rota run`` does, twice a second); one status read per running command,
    and a store that cannot answer changes nothing."""
    with _lock:
        running = list(_running.items())
    now = time.monotonic()
    for proc, (job, _) in running:
        signalled = _cancelled.get(proc)
        if signalled is not None:
            if now - signalled[0] >= grace:
                _kill_group(proc)
            continue
        try:
            ended = cancelled(str(job))
        except Exception:  # the store is down: try again on the next call
            continue
        if ended:
            _end(proc, "cancelled", now)
            log.info("job %r: cancelled while running: ending its command", job)


def stop_replaced(job: object, at: float | None) -> bool:
    """End the command of job ``job``'s run at ``at`` (``Overlap.REPLACE`` replaced it:
    ``RUN_REPLACED``): SIGTERM to its process group, SIGKILL after the grace
    :func:`stop_cancelled` gives. Its run ends in :class:`~rota.durable.RunCancelled`,
    not retried; the slot that replaced it runs once it has ended. Whether such a
    command was running. O(commands running)."""
    with _lock:
        found = [proc for proc, run in _running.items() if run == (job, at)]
    for proc in found:
        _end(proc, "replaced by its next slot (overlap = replace)", time.monotonic())
        log.info("job %r: its run at %s is replaced by the next slot: ending its command",
                 job, "-" if at is None else epoch_shown(at))  # fmt: skip
    return bool(found)


def _end(proc: subprocess.Popen[bytes], why: str, now: float) -> None:
    """SIGTERM ``proc``'s process group, its run to end in ``RunCancelled`` (``why``)."""
    with _lock:
        _cancelled.setdefault(proc, (now, why))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)


def stop_all(grace: float = KILL_GRACE) -> None:
    """Shutdown: SIGTERM every running command's group, SIGKILL what is left after
    ``grace``. Their runs end in :class:`~rota.durable.GivenBack`: given back, to
    run again (same key), not failed."""
    with _lock:
        procs = list(_running)
        _given_back.update(procs)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
