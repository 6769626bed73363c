"""Completions: decided from the row as claimed, committed alone or in groups."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from rota._core.task import Run, reported, run_at, run_slot
from rota._core.types import (
    Action,
    GivenBack,
    Result,
    RunOutcome,
    Status,
    Time,
    epoch_shown,
)
from rota.store import Change, Edit, TaskRow

from ._claims import Claims
from ._commit import Committed, Completion
from ._held import _engine_of, _parent, _tid
from ._rows import Held, dump, never, new_tuple, outcome_row, restore

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""


class Completions(Claims):
    """A run's start and completion: the engine decides the completion in advance
    from the row as claimed (one fenced UPDATE when the row did not change), the
    committer thread commits completions in groups, a run given back at a stop is
    released, and a completion the store cannot take is left to its lease."""

    __slots__ = ()

    def _give_back(self, task: Held | Run, error: GivenBack, started: Time) -> RunOutcome:
        """A run its node stopped (:class:`GivenBack`): released as claimed, nothing
        recorded; its outcome, ``retry``, is only reported. If the store cannot take
        the release, the lease runs out and the run is taken over all the same (as a
        concurrent task's run always is: its lease is its task's, with other runs)."""
        if isinstance(task, Run):
            logger.info(
                "task %r: its run at %s was stopped by this node's shutdown: it runs again "
                "(same key) once the task's lease runs out",
                task.task_id,
                epoch_shown(run_at(task)),
            )
            self._untrack(_tid(task), _parent(task).fence)
            return self._given_back(task, error, started)
        with self._hold:
            self._held.pop(task.task_id, None)  # type: ignore[call-overload]
        try:
            self._release(task.row)
        except Exception:
            logger.exception(
                "task %r: its run at %s could not be given back; it is taken over once "
                "its lease expires",
                task.task_id,
                epoch_shown(run_at(task)),
            )
        else:
            logger.info(
                "task %r: its run at %s was stopped by this node's shutdown and given back: "
                "it runs again (same key) on the next node to claim it",
                task.task_id,
                epoch_shown(run_at(task)),
            )
        return self._given_back(task, error, started)

    def _given_back(self, task: Held | Run, error: GivenBack, started: Time) -> RunOutcome:
        """The outcome reported for a run given back: ``retry``, recorded nowhere."""
        assert task.plan is not None
        outcome = RunOutcome(
            task.task_id, run_at(task), Result.RETRY, error, task.plan.attempt, started
        )
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def start(self, task: Held | Run) -> bool:
        """A worker picks up a claimed run: ``False`` if it was cancelled or its lease lost."""
        lease = task if task.__class__ is Held else self._lease_of(task)
        if lease.cancelled or lease.lost:
            with self._hold:
                self._abandon(task, lease)
            return False
        with self._hold:  # status() reads it under the same lock
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
        return True

    def complete(
        self, task: Held | Run, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Record a run's end in one fenced transaction: the engine decides from the row.

        If the lease was lost meanwhile, nothing is written (the new holder's
        outcome counts); the run's outcome is still returned, as this node
        saw it, and the loss is logged. Raises what the store raises.
        """
        if isinstance(error, GivenBack):
            return self._give_back(task, error, started)
        edit, outcome = self._decided(task, error, started, finished)
        return self._settled(task, self._store.modify_many([edit])[0], outcome, error)

    def complete_later(
        self,
        task: Held | Run,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a run for a runner: decided here, committed with others.

        While a runner drives this scheduler (with ``group_commit``, the
        default), the caller (the dispatcher, a pool worker, the event loop)
        hands the completion to the committer thread and goes on with its
        next run at once, so running overlaps committing (an fsync, a round
        trip). The committer commits all the completions that queued while it
        committed the previous ones in one transaction (group commit), then
        reports each through ``then``: an outcome is reported only once it is
        durable. Idle, a completion is committed at once, alone.

        ``linger`` (a dispatcher that runs its claims itself, and so claims
        again as soon as its claimed batch is run): the completion waits for
        that next claim, which commits the batch's completions in its own
        transaction on the dispatcher's thread (:meth:`_claim_next`), with no
        thread to wake per completion (the committer reports them, once per
        batch: :meth:`GroupCommit.deliver`); completions left waiting
        :data:`~rota.durable._commit.LINGER` seconds after the last one (a
        long run in the batch) are committed by the committer.

        At most ``batch`` completions wait: a caller finding that many waits
        for room. A crash before the commit only means the run starts again
        after its lease (at-least-once, same key). Without a committer
        (``group_commit=False``, no runner, or its runner stopping) the
        completion is committed on the caller's thread, one transaction
        each. O(1) here, besides waiting for room.
        """
        if isinstance(error, GivenBack):
            then(self._give_back(task, error, started))
            return
        edit, outcome = self._decided(task, error, started, finished)
        completion: Completion = new_tuple(Completion, (edit, task, outcome, error, then))
        if not self._commits.hand_over(completion, linger=linger):
            self._commits.commit([completion])

    def _commit_and_claim(
        self, batch: Sequence[Completion], now: Time, limit: int
    ) -> list[TaskRow]:
        """Commit completions and claim up to ``limit`` runs in one store transaction
        (one commit, one fsync), report the completions, return the claimed rows.

        If that transaction fails, the completions are committed on their own
        (:meth:`GroupCommit.commit`, with its fallbacks) and the claim is made alone,
        raising what it raises. O(len(batch) + limit).
        """
        try:
            results, rows = self._store.complete_and_claim(
                [c.edit for c in batch], self._node, now, limit, self._lease, self._actions.known()
            )
        except Exception:
            self._commits.commit(batch)
            return self._store.claim(self._node, now, limit, self._lease, self._actions.known())
        self._commits.deliver(batch, results)
        return rows

    def _recorded(self, completion: Completion, result: Committed) -> RunOutcome:
        """The outcome to report for a completion the committer committed (or could not)."""
        task, outcome = completion.task, completion.outcome
        if isinstance(result, Exception):
            return self._unrecorded(task, outcome, result)
        return self._settled(task, result, outcome, completion.error)

    def _unrecorded(self, task: Held | Run, outcome: RunOutcome, exc: Exception) -> RunOutcome:
        """A completion the store could not take (down, unreachable): logged, reported.

        Nothing is lost: the run's lease runs out, and it is run again, by this
        node or another, with the same idempotency key (at-least-once). (A
        concurrent task's lease is let go for it: this node renews it no more.)
        """
        if isinstance(task, Run):
            self._untrack(_tid(task), _parent(task).fence)
        self._unwritten = True
        logger.error(
            "task %r: the completion of its run at %s could not be recorded (%r); the run "
            "will be taken over when its lease expires",
            task.task_id,
            epoch_shown(run_at(task)),
            exc,
        )
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def _decided(
        self, task: Held | Run, error: BaseException | None, started: Time, finished: Time
    ) -> tuple[Edit, RunOutcome]:
        """The fenced completion of a run, decided in advance from the row as claimed.

        Written as it is if the row did not change meanwhile (the usual case:
        one UPDATE, no read); otherwise ``complete`` decides again inside the
        transaction, from the row as it is then.
        """
        if task.__class__ is not Held:
            return self._decided_run(task, error, started, finished)  # type: ignore[arg-type]
        with self._hold:  # its run is over: no more heartbeats for it
            self._held.pop(task.task_id, None)  # type: ignore[call-overload]
        value = task.value
        if self._timed:
            started, finished = self._shifted(started, finished)
        claimed = task.row
        engine = task.engine
        outcome = engine.complete(task, error, started, finished)
        new, requeued = dump(task, keep_lease=False)
        # The engine served this run alone, and it and the task refer to each other:
        # unlinked, the task is freed by reference counting, not later by the cyclic
        # collector's passes (bench/results/instructions.md); the engine, reset,
        # serves a claim to come.
        del task.engine
        engine.reset()
        self._engines.append(engine)
        record = outcome_row(claimed, outcome, finished)
        expected = Change(outcome, row=new, outcome=record, requeued=requeued)
        # Changes that waited for this run change the spec: written by the full path.
        ahead = None if "pending" in claimed.state else (claimed.version, expected)
        complete = partial(_complete_row, task.action, value, error, started, finished)
        edit: Edit = new_tuple(Edit, (claimed.task_id, complete, task.fence, ahead))
        return edit, outcome

    def _shifted(self, started: Time, finished: Time) -> tuple[Time, Time]:
        """A run's times shifted onto the store's clock, which decides (it keeps one):
        it finished now by that clock, after running as long as it did. O(1)."""
        own = self._store.now()
        return (started, finished) if own is None else (own - (finished - started), own)

    def _decided_run(
        self, run: Run, error: BaseException | None, started: Time, finished: Time
    ) -> tuple[Edit, RunOutcome]:
        """:meth:`_decided` for a run of a concurrent task: the engine completes the run
        of that slot in the row as it is at the commit (other runs of the task start and
        end meanwhile), under the task's lease; the outcome is recorded for the run's
        own slot."""
        value = run.value
        if self._timed:
            started, finished = self._shifted(started, finished)
        parent = _parent(run)
        slot = run_slot(run)
        outcome = parent.engine.complete(run, error, started, finished)

        def complete(row: TaskRow | None) -> Change[RunOutcome]:
            assert row is not None
            fresh = restore(row, never)
            mine = fresh.engine.run_of(fresh, slot)
            if mine is None:  # its task was scheduled anew meanwhile: recorded, no more
                return Change(outcome, outcome=outcome_row(row, outcome, finished, slot))
            mine.value = value
            result = fresh.engine.complete(mine, error, started, finished)
            again, queued = dump(fresh, keep_lease=True)
            record = outcome_row(row, result, finished, slot)
            return Change(result, row=again, outcome=record, requeued=queued)

        return Edit(_tid(run), complete, parent.fence), outcome

    def _settled(
        self,
        task: Held | Run,
        decided: Change[Any] | None,
        outcome: RunOutcome,
        error: BaseException | None,
    ) -> RunOutcome:
        """The outcome of a committed (or fenced-off) completion; wakes runners, emits."""
        if self._unwritten:
            self._unwritten = False
            logger.warning("the store records completions again")
        if decided is None:
            # cancelled (and its id reused) while it ran: only reported
            if (task if task.__class__ is Held else self._lease_of(task)).cancelled:
                outcome = outcome._replace(result=reported(error))
            else:
                logger.warning(
                    "task %r: lease lost before its run at %s completed; its outcome is not "
                    "recorded (the run was taken over)",
                    task.task_id,
                    epoch_shown(outcome.at),
                )
        else:
            outcome = decided.value
            if task.__class__ is Held:
                if self.wakeups and decided.requeued and decided.row is not None:
                    self.wake(decided.row.due)
            elif decided.row is not None:
                self._track(_tid(task), decided.row, _parent(task).fence)  # type: ignore[arg-type]
        if decided is None and task.__class__ is not Held:
            self._untrack(_tid(task), _parent(task).fence)  # type: ignore[arg-type]
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome


def _complete_row(
    action: Action,
    value: object,
    error: BaseException | None,
    started: Time,
    finished: Time,
    row: TaskRow | None,
) -> Change[RunOutcome]:
    """A run's completion decided again from its row as it is at the commit (changed
    since the claim: cancelled, paused, rescheduled by another process meanwhile).
    A function, not a closure over the run, for :func:`functools.partial`: two objects
    for the cyclic collector to track while the completion waits, not six."""
    assert row is not None
    status = Status.CANCELLED if row.status == Status.CANCELLED else Status.RUNNING
    fresh = restore(row, action, status)
    fresh.value = value
    result = fresh.engine.complete(fresh, error, started, finished)
    again, queued = dump(fresh, keep_lease=False)
    return Change(result, row=again, outcome=outcome_row(row, result, finished), requeued=queued)
