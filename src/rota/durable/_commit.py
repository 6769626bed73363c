"""Group commit: runners' completions committed together, each reported once durable.

A durable scheduler decides a run's completion where the run ended (the
dispatcher, a pool worker, the event loop) and hands it here. While a runner
drives the scheduler, a committer thread of its own commits what queued while
it committed the last batch, in one transaction, then reports each
completion; a dispatcher that runs its claims itself leaves its completions
to be committed with its next claim instead (``linger``). This module knows
the queue, the thread and the transaction; what a committed completion means
(the outcome, the wake-ups, a lease lost) is the scheduler's ``record``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rota._core.task import Run
from rota._core.types import RunOutcome
from rota.store import Change, Edit, Store

from ._rows import Held

AT_ONCE = -math.inf
"""The committer thread's deadline when what waits is to be committed at once."""

LINGER = 0.005
"""Seconds without a new completion after which the completions made on a runner's
dispatcher thread, waiting for that thread to commit them with its next claim, are
committed by the committer thread instead (the dispatcher is in a long run)."""

Committed = Change[Any] | Exception | None
"""What committing one completion gave: the change written, ``None`` (fenced off: its
lease was lost), or the error the store raised."""


class Completion(NamedTuple):
    """A run's completion handed to the committer thread: the edit to commit, what
    to report, and where to report it."""

    edit: Edit
    task: Held | Run
    outcome: RunOutcome
    error: BaseException | None
    then: Callable[[RunOutcome], object]


class GroupCommit:
    """The completions waiting for a commit, and the committer thread that commits them.

    ``record(completion, result)`` turns a committed (or failed) completion
    into the outcome its ``then`` is given. At most ``batch`` completions
    wait: a caller finding that many waits for room. One condition guards
    the queue, the lingering deadline, the committed batches waiting to be
    reported and :attr:`thread`; it is notified whenever any of them changes.
    """

    __slots__ = (
        "_batch", "_changed", "_lock", "_record", "_reports", "_store", "_until", "_waiting",
        "thread",
    )  # fmt: skip

    def __init__(
        self, store: Store, batch: int, record: Callable[[Completion, Committed], RunOutcome]
    ) -> None:
        self._store = store
        self._batch = batch
        self._record = record
        self._waiting: deque[Completion] = deque()
        # The condition's lock, taken directly where nobody waits on the condition: a
        # Condition's ``with`` is two Python calls, once or twice a run
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # While only lingering completions wait: when the committer thread takes them if
        # the dispatcher has not (AT_ONCE: at once)
        self._until = AT_ONCE
        # Completions committed by dispatchers, for the committer thread to report
        self._reports: deque[tuple[Sequence[Completion], Sequence[Committed]]] = deque()
        self.thread: threading.Thread | None = None
        """The committer thread while a runner drives the scheduler, else ``None``."""

    def start(self, spawn: Callable[[Callable[[], None], str], threading.Thread]) -> None:
        """Start a committer thread (``spawn(target, name)`` makes it). It runs while it
        is :attr:`thread`. The caller serializes starts and stops."""
        thread = spawn(self._loop, "rota-committer")
        with self._changed:
            self.thread = thread
        thread.start()

    def stop(self) -> threading.Thread | None:
        """Tell the committer thread to commit what it has, report it and end; the
        thread, for the caller to join (``None`` if none ran)."""
        with self._changed:
            thread, self.thread = self.thread, None
            self._changed.notify_all()
        return thread

    def hand_over(self, completion: Completion, *, linger: bool) -> bool:
        """Queue ``completion`` for the committer thread; ``False`` if there is none
        (the caller commits it). ``linger``: it waits for the dispatcher's next claim
        (:meth:`lingering`), or :data:`LINGER` seconds after the last one. O(1), besides
        waiting for room."""
        with self._lock:
            committer = self.thread
            if committer is None:
                return False
            if committer is not threading.current_thread():
                while len(self._waiting) >= self._batch and self.thread is committer:
                    if linger:  # its own completions fill the queue: commit them now
                        self._until = AT_ONCE
                        self._changed.notify_all()
                    self._changed.wait()
            if self.thread is not committer:
                return False
            if not linger:
                self._until = AT_ONCE
            elif not self._waiting or self._until > AT_ONCE:
                self._until = time.monotonic() + LINGER  # (none urgent)
            self._waiting.append(completion)
            if not linger or len(self._waiting) == 1:
                self._changed.notify_all()
            return True

    def lingering(self) -> list[Completion]:
        """The completions waiting for a dispatcher's claim, taken (to commit with it)."""
        with self._lock:
            if self._waiting and self._until > AT_ONCE:
                return self._take()
            return []

    def _loop(self) -> None:
        """The committer thread: commit what runners hand over (lingering completions
        once their time is up), report what dispatchers committed with their claims
        (see :meth:`deliver`), until stopped and drained."""
        me = threading.current_thread()
        while True:
            with self._changed:
                while self.thread is me and not self._reports:
                    if not self._waiting:
                        self._changed.wait()
                        continue
                    wait = self._until - time.monotonic()
                    if wait <= 0:
                        break
                    self._changed.wait(wait)
                reports = list(self._reports)
                self._reports.clear()
                due = self.thread is not me or self._until <= time.monotonic()
                batch = self._take() if self._waiting and due else []
            for done, results in reports:
                self._report(done, results)
            if batch:
                self.commit(batch)
            elif not reports:
                return

    def _take(self) -> list[Completion]:
        """The completions waiting to be committed, taken (under the condition)."""
        batch = list(self._waiting)
        self._waiting.clear()
        self._until = AT_ONCE
        self._changed.notify_all()  # room for callers waiting to hand over
        return batch

    def commit(self, batch: Sequence[Completion]) -> None:
        """Commit completions in one transaction, then report each through its ``then``.

        A batch whose transaction fails is retried one completion at a time,
        so one bad completion fails alone; one the store cannot take is
        reported with the error it met. O(len(batch)).
        """
        results: list[Committed]
        try:
            results = list(self._store.modify_many([c.edit for c in batch]))
        except Exception as exc:
            results = [exc] if len(batch) == 1 else [self._alone(c.edit) for c in batch]
        self.deliver(batch, results)

    def deliver(self, batch: Sequence[Completion], results: Sequence[Committed]) -> None:
        """Report committed completions: on the committer thread while there is one
        (a dispatcher commits under its runner's claim gate, which ``on_outcome``
        may need: ``stop()`` takes it), else here."""
        with self._lock:
            committer = self.thread
            if committer is not None and committer is not threading.current_thread():
                self._reports.append((batch, results))
                self._changed.notify_all()
                return
        self._report(batch, results)

    def _report(self, batch: Sequence[Completion], results: Sequence[Committed]) -> None:
        """Report each committed (or failed) completion through its ``then``."""
        for completion, result in zip(batch, results, strict=True):
            completion.then(self._record(completion, result))

    def _alone(self, edit: Edit) -> Committed:
        """One completion in a transaction of its own: its result, or the error it met."""
        try:
            return self._store.modify_many([edit])[0]
        except Exception as exc:
            return exc
