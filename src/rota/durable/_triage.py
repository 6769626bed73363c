"""The triage of claimed rows: each becomes a run to start, or is settled here.

A claimed row may need no run: its misfire policy skipped or moved it, no
action here can run it, this rota cannot read it, or its lease expired too
often. Each case is decided here, by the engine restored from the row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from rota._core.calls import Bound, prepare
from rota._core.deps import Record, verdict
from rota._core.stored import StoredEngine, plan_state
from rota._core.task import Run, Task, raiser, run_at
from rota._core.types import (
    FINISHED,
    RELEASED,
    Action,
    Status,
    Time,
    epoch_shown,
)
from rota._core.waits import TaskRecord, record_of
from rota.store import Change, TaskRow

from ._held import HeldRuns
from ._rows import Held, dump, never, restore, slot_of

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""


class LeaseExpired(Exception):  # noqa: N818 - it names the event, as TimeoutError does
    """A run's lease expired ``max_expiries`` times: its holders kept dying or stalling.

    The run fails with this error (retried per the task's policy, like any
    failure) instead of being started again forever.
    """


class Triage(HeldRuns):
    """Claimed rows turned into runs (or settled) by the engine, restored from them.

    ``_engines`` keeps the engines of completed runs, reset, for claims to come: at
    most as many as runs were held here at once. ``_lease`` is a lease's length,
    ``_max_expiries`` how many times a run's lease may expire before it fails.
    """

    __slots__ = ("_engines", "_lease", "_max_expiries")

    _engines: list[StoredEngine]
    _lease: Time
    _max_expiries: int

    def _decide(self, row: TaskRow, now: Time, moved: list[Time]) -> Held | Run | None:
        """Turn a claimed row into a run to start, or settle it (and return ``None``).

        A run its misfire policy moved to a later slot is given back at that
        slot's time, which is appended to ``moved``."""
        function = self._actions.function(row.action)
        if function is None:
            self._release(row)
            return None
        if row.unreadable is not None:
            self._refuse(row, row.unreadable)
            return None
        try:
            task = self._restored(function, row, again=row.reclaimed)
        except Exception as exc:  # a spec this rota cannot read (a newer one wrote it?)
            self._refuse(row, repr(exc))
            return None
        assert task.plan is not None
        if row.reclaimed:
            logger.warning(
                "task %r: took over its run at %s from an expired lease (expiry %d)",
                row.task_id,
                epoch_shown(row.due),
                row.expiries,
            )
        if task.plan.concurrent:
            return self._claim_run(task, now, moved)
        if row.reclaimed:
            if row.expiries >= self._max_expiries:
                self._fail_expired(task, task.engine, row, now)
                return None
        else:
            claimed = task.engine.claim(now, queued=True)
            plan = task.plan
            # (a plan without controls, plan.extra false, is not changed by a claim)
            if claimed is None or (plan.extra and task.row.state != plan_state(plan)):
                # The misfire policy decided: store its decision. A run it moved to a
                # later slot is given back at that time, to be claimed in time order
                # with every other task's runs (as in memory); so is one it ended.
                settled = claimed is None
                new, requeued = dump(task, keep_lease=not settled)
                decided = self._store.modify(
                    row.task_id,
                    lambda _: Change(None, row=new, requeued=requeued),
                    fence=row.fence,
                )
                if decided is None or settled:
                    if decided is not None and requeued:
                        moved.append(new.due)
                    if decided is not None and new.state.get("waiting"):
                        self._recheck(new, now)
                    return None
                task.row = new
        task.until = now + self._lease
        return task

    def _restored(
        self, function: Callable[..., object], row: TaskRow, *, again: bool = False
    ) -> Held:
        """A claimed row's task, its action bound to it (the run's facts: id, fence),
        in ``queued`` (taken over: ``again``) or ``scheduled`` to be claimed."""
        action = self._bind(function, row)
        if isinstance(action, Bound):  # before the restore and the claim: a concurrent
            action.bind(row.task_id, None)  # task's runs are bound to copies made then
            action.fence, action.expiries = row.fence, row.expiries
        status = Status.QUEUED if again else Status.SCHEDULED
        try:  # (list.pop is atomic: claims on other threads pop engines too)
            engine: StoredEngine | None = self._engines.pop()
        except IndexError:
            engine = None
        task = restore(row, action, status, again=again, engine=engine)
        if isinstance(action, Bound):
            action.plan = task.plan
        if task.plan is not None and task.plan.after:
            task.engine.reader = self._upstream
        return task

    def _recheck(self, row: TaskRow, now: Time) -> None:
        """A run just stored waiting (``row``) is decided again if its upstreams changed
        meanwhile: an upstream's run that ended between the read this claim decided
        from and the write that parked it woke no one (the index of waiting runs did
        not hold this one yet), so the run is made due now. One read per upstream,
        and a write only then. On PostgreSQL this read sees such an end because the
        park locked the upstreams' rows (``store._waits.sync_waits``'s ``share``)."""
        task = restore(row, never)
        plan = task.plan
        assert plan is not None
        assert plan.after
        slot = slot_of(row)
        window = (slot if plan.window is None else plan.window, slot)
        if verdict(plan.after, slot, window, self._upstream).waiting == plan.waiting:
            return

        def wake(found: TaskRow | None) -> Change[None]:
            if found is None or found.version != row.version:  # claimed or changed since
                return Change(None)
            woken = found.copy()
            woken.due = min(now, found.due)
            return Change(None, row=woken, requeued=True)

        self._store.modify(row.task_id, wake)

    def _upstream(self, task_id: Hashable) -> Record | None:
        """What the store knows of an upstream task, for a claimed run's ``after``
        (:class:`~rota._core.waits.TaskRecord`): its row (one read) and, as the
        decision asks, how its slots ended (a read per range). ``None`` for a task
        never stored."""
        if not isinstance(task_id, str):
            return None
        row = self._store.get(task_id)
        if row is None or row.unreadable is not None:
            return None
        fetch = partial(self._store.ended, task_id)
        task = restore(row, never)
        if row.status in FINISHED:
            return TaskRecord({}, None, task.plan, None, finished=True, fetch=fetch)
        return record_of(task, {}, None, fetch)

    def _claim_run(self, task: Held, now: Time, moved: list[Time]) -> Run | None:
        """:meth:`_decide` for a concurrent task (``Overlap.allow(n)``, ``REPLACE``): the
        engine claims a run of its own (one whose lease expired elsewhere first), and
        the task, with it in flight, is stored under this node's lease. A run taken
        over too many times fails with :class:`LeaseExpired`."""
        row = task.row
        run, stops, new, requeued = _claimed_run(task, now)
        decided = self._store.modify(
            row.task_id, lambda _: Change(None, row=new, requeued=requeued), fence=row.fence
        )
        if decided is None:
            return None
        task.row = new
        task.until = now + self._lease
        self.replacing(stops)
        self._track(row.task_id, new, row.fence)
        if run is None:
            if requeued:
                moved.append(new.due)
            return None
        assert isinstance(run, Run)
        if row.reclaimed and row.expiries >= self._max_expiries:
            self._fail_expired(run, task.engine, row, now)
            return None
        return run

    def _fail_expired(self, run: Held | Run, engine: Any, row: TaskRow, now: Time) -> None:
        """A run taken over ``max_expiries`` times (a poison pill: it kills or stalls
        every node that starts it) fails with :class:`LeaseExpired` instead of starting
        again; its schedule goes on."""
        engine.start(run)
        error = LeaseExpired(
            f"the lease of task {row.task_id!r}'s run at {run_at(run)!r} expired "
            f"{row.expiries} times"
        )
        self.complete(run, error, now, now)

    def _refuse(self, row: TaskRow, why: str) -> None:
        """A claimed row this node cannot read (its JSON is corrupt, or a newer rota
        wrote what this one does not know): logged once, left as it is, and never
        claimed here again. Its lease is not renewed, so once it runs out a node that
        can read the row takes the run over. O(refused)."""
        if self._actions.refuse(row.task_id):
            logger.error(
                "task %r: this process cannot read its stored row (%s) and claims it no "
                "more; the row is left as it is",
                row.task_id,
                why,
            )

    def _bind(self, function: Callable[..., object], row: TaskRow) -> Action:
        """The call of a stored action; a call shape that no longer fits fails the run."""
        try:
            return prepare(function, row.spec["args"], row.spec["kwargs"])
        except TypeError as exc:
            return raiser(exc)

    def _release(self, row: TaskRow) -> None:
        """Give a claimed, unstarted run back: claimable again at once, nothing counted."""

        def give_back(current: TaskRow | None) -> Change[None]:
            assert current is not None
            current.status = str(RELEASED)
            current.owner = current.lease_until = None
            return Change(None, row=current)

        self._store.modify(row.task_id, give_back, fence=row.fence)


def _claimed_run(task: Held, now: Time) -> tuple[Task | None, list[Run], TaskRow, bool]:
    """A concurrent task's next run claimed by its engine at ``now`` (``None``: none may
    start), the runs ``REPLACE`` stops for it, and the row to store (its lease kept while
    a run is in flight) with whether its run was queued anew. O(runs in flight)."""
    run = task.engine.claim(now, queued=True)
    stops = task.engine.take_stops()
    new, requeued = dump(task, keep_lease=True)
    return run, stops, new, requeued
