"""The runs this node holds: the first floor of a store's runner half.

A claimed run holds a fenced lease in the store until its completion is
committed; this class keeps which runs those are (``_held``), the claimed runs
not yet handed to a runner (``_buffer``), and the concurrent tasks whose
shared lease this node holds while runs of theirs are in flight (``_flying``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Any

from rota._core.task import Run, Task
from rota._core.types import (
    CLAIMED,
    FINISHED,
    Status,
    Time,
)
from rota.store import TaskRow

from ._reads import StoredReads
from ._rows import Held


class HeldRuns(StoredReads):
    """The runs held by this node under their leases, and the shared leases of
    concurrent tasks (``Overlap.allow(n)``, ``REPLACE``).

    Invariants (:meth:`check_held`): a run waiting in ``_buffer`` holds its lease
    here (in ``_held``) unless it was lost or cancelled meanwhile; a concurrent task
    tracked in ``_flying`` holds its lease here. Every field is guarded by ``_hold``.
    """

    __slots__ = ("_buffer", "_flying", "_held", "_hold")

    _hold: threading.Lock
    """Guards the fields below (held briefly: never across a store call)."""
    _buffer: deque[Held | Run]
    """Claimed runs not yet handed to a runner, in the order to start them."""
    _held: dict[str, Held]
    """The lease of each task whose run this node claimed and has not completed."""
    _flying: dict[str, tuple[int, Time | None]]
    """Concurrent tasks whose lease this node holds while runs of theirs are in
    flight: (row version, when it may start another; ``None``: not before one of
    those ends). Their leases are in ``_held``, as the first run claimed them."""

    def check_held(self) -> None:
        """Assert the invariants above. O(runs held here)."""
        with self._hold:
            for task in self._buffer:
                if isinstance(task, Held):
                    assert task.lost or task.cancelled or self._held.get(_tid(task)) is task
            for task_id in self._flying:
                assert task_id in self._held, task_id

    def changed(self, task_id: str, row: TaskRow) -> None:
        """A scheduling call wrote ``row``: if it is a concurrent task held here, note
        when it may go on; wake the runners for its due time. O(1)."""
        if task_id in self._flying:
            self._track(task_id, row, row.fence)
        if self.wakeups:
            self.wake(row.due)

    def status_of(self, row: TaskRow) -> Status:
        """A stored task's status as this process sees it: a run this node claimed
        ahead of its pool's workers is ``queued`` until one starts it (the store
        says ``running`` from the claim on: other processes cannot tell). O(1)."""
        status = Status(row.status)
        if status is CLAIMED and self._held:
            with self._hold:
                held = self._held.get(row.task_id)
                if held is not None and held.fence == row.fence:
                    return held.status
        return status

    def cancelled_here(self, task_id: Hashable) -> None:
        """The task's run held by this node (if any) belongs to a cancelled task: it
        does not start, and its completion is only reported (as in memory)."""
        with self._hold:
            held = self._held.get(task_id)  # type: ignore[call-overload]
            if held is not None:
                held.cancelled = True

    def _flying_head(self) -> Time | None:
        """The earliest time a concurrent task held here may start a run, or ``None``."""
        if not self._flying:
            return None
        with self._hold:
            return min((at for _, at in self._flying.values() if at is not None), default=None)

    def _track(self, task_id: str, row: TaskRow, fence: int) -> None:
        """A concurrent task's row as just written under this node's lease ``fence``:
        remember when it may start another run (its due time, unless every run it may
        have is in flight), or forget it if the lease was let go. Writes committed out
        of order (a claim and a completion on two threads) keep the newest."""
        if row.owner != self._node or (row.status in FINISHED and not row.state.get("flying")):
            self._untrack(task_id, fence)
            return
        at = None if row.state.get("full") else row.due
        with self._hold:
            seen = self._flying.get(task_id)
            if seen is None or seen[0] <= row.version:
                self._flying[task_id] = (row.version, at)
        if at is not None and self.wakeups:
            self.wake(at)

    def _untrack(self, task_id: str, fence: int) -> None:
        """This node holds no lease of concurrent task ``task_id`` under ``fence`` any
        more: no heartbeat renews it, no run of it is started here."""
        with self._hold:
            self._flying.pop(task_id, None)
            held = self._held.get(task_id)
            if held is not None and held.fence == fence:
                del self._held[task_id]

    def _lease_of(self, task: Held | Run) -> Held:
        """The lease a claimed run is held under: its own, or, for a run of a concurrent
        task, the one the task's first run here took, which the heartbeat renews (its
        task as restored, if this node holds that lease no more). O(1)."""
        if isinstance(task, Held):
            return task
        parent = _parent(task)
        held = self._held.get(_tid(task))
        return held if held is not None and held.fence == parent.fence else parent

    def _abandon(self, task: Held | Run, lease: Held) -> None:
        """A claimed run this node will not start (its lease ran out first, or was lost,
        or its task was cancelled): its lease is renewed no more, so that it runs out
        and whoever claims next (this node too) takes the run over, rather than this
        node's heartbeat keeping a run no one runs. Called under ``_hold``. O(1)."""
        task_id = _tid(task)
        if self._held.get(task_id) is lease:
            del self._held[task_id]
            self._flying.pop(task_id, None)  # a concurrent task's runs share that lease


def _parent(run: Run) -> Held:
    """The task a concurrent task's run was claimed from, as restored then."""
    parent = run.parent
    assert isinstance(parent, Held)
    return parent


def _tid(task: Task) -> str:
    """A stored task's id (always a str; a run's entry may hold a key of the engine's
    while it waits for a retry: its task's, then)."""
    task_id = (task.parent if isinstance(task, Run) else task).entry[2]
    assert isinstance(task_id, str)
    return task_id


def _engine_of(task: Task) -> Any:
    """The engine a claimed run belongs to: its task's (a concurrent task's run: the
    engine its task was restored into when the run was claimed)."""
    return task.parent.engine if isinstance(task, Run) else task.engine  # type: ignore[attr-defined]
