"""Stored rows and the engine: one implementation of every scheduling decision.

A durable scheduler never decides anything itself. To claim, complete,
cancel, pause, resume or reschedule a stored task it rebuilds the task from
its row (:func:`restore`: a :class:`Held` task adopted by an engine of its
own), applies the very engine operation the in-memory scheduler applies,
and stores what the task became (:func:`dump`). Retries and backoff,
misfire handling, fixed-rate slots, cron, pause and the statuses are
therefore the engine's, whether a task lives in memory or in a database.
"""

from __future__ import annotations

import json
from typing import Any

from rota._core.engine import Engine
from rota._core.policy import Plan
from rota._core.stored import (
    Policies,
    StoredEngine,
    applied_spec,
    plan_from_json,
    plan_state,
    policies_of,
)
from rota._core.task import Task
from rota._core.types import (
    FINISHED,
    Action,
    RunOutcome,
    Status,
    Time,
    error_text,
    recorded_result,
    slot_time,
    value_text,
)
from rota.store import OutcomeRow, TaskRow

RUNNING, SCHEDULED = Status.RUNNING, Status.SCHEDULED


class Held(Task):
    """A task rebuilt from its row, adopted by an engine of its own.

    ``row`` is the row it was rebuilt from; ``adopted`` its entry at
    adoption (a different entry afterwards means the engine queued a new
    run); ``until`` the end of its lease as this node last renewed it;
    ``lost``/``cancelled`` what the heartbeat learned about it meanwhile.
    """

    __slots__ = ("adopted", "cancelled", "engine", "lost", "row", "until")

    engine: StoredEngine
    row: TaskRow
    adopted: Any
    until: Time
    lost: bool
    cancelled: bool

    @property
    def fence(self) -> int:
        """The fencing token of the lease this run is held under."""
        return self.row.fence


def restore(
    row: TaskRow,
    action: Action,
    status: Status | None = None,
    *,
    again: bool = False,
    engine: StoredEngine | None = None,
) -> Held:
    """Rebuild the task a row describes, in ``status`` (default: the row's), adopted
    by ``engine`` (an engine of one task that knows none now: see
    :meth:`~rota._core.stored.StoredEngine.reset`), or a new one. O(1); a concurrent task
    (``Overlap.allow(n)``, ``REPLACE``) is rebuilt with its runs in flight, due again
    with ``again`` (see :meth:`~rota._core.stored.StoredEngine.adopt_runs`): O(runs).

    Raises what decoding a stored spec raises (:class:`~rota.store.StoreError`
    for an unknown kind, ``ImportError`` for a ``retry_on`` type no longer there).
    """
    plan = plan_from_json(row.spec, row.state, _policies(row), row.priority, row.paused)
    task = Held.__new__(Held)
    task.action = action
    task.status = status or Status(row.status)
    task.entry = (row.due, -1, row.task_id)
    task.plan = plan
    task.last = task.value = None
    task.row = row
    task.until = row.lease_until if row.lease_until is not None else 0
    task.lost = task.cancelled = False
    # claims in time order across the store: one task an engine (see Engine.claim)
    task.engine = StoredEngine(1) if engine is None else engine
    if plan.concurrent:
        _adopt_concurrent(task, plan, row.state, again)
    else:
        task.engine.adopt(task, row.due)
    task.adopted = task.entry
    return task


_POLICIES: dict[str, Policies] = {}


def _policies(row: TaskRow) -> Policies:
    """The policies ``row``'s spec names: one tuple per distinct spec text as stored
    (specs are replaced, never changed in place, and policies are immutable), so a
    claim of a task whose spec was read before decodes none of them again (about
    10,000 instructions a claim, measured). O(1) then; else O(size of the spec).
    Raises what decoding them raises (see :func:`restore`)."""
    raw = row.spec_text
    if raw is None or raw[0] is not row.spec:  # (a row built here, or a spec replaced)
        return policies_of(row.spec)
    found = _POLICIES.get(raw[1])
    if found is None:
        if len(_POLICIES) >= CACHED_SPECS:
            _POLICIES.clear()
        found = _POLICIES[raw[1]] = policies_of(row.spec)
    return found


CACHED_SPECS = 1024
"""The most spec texts whose policies are kept (the cache starts over past that)."""


def _adopt_concurrent(task: Held, plan: Plan, state: dict[str, Any], again: bool) -> None:
    """Adopt a concurrent task: its entry is its next run (``next``, when the row's due
    time is a run's retry instead), its runs beside it; it is running while any is."""
    flying = state.get("flying") or ()
    if task.status not in FINISHED:
        task.status = RUNNING if flying else SCHEDULED
    task.engine.adopt(task, state.get("next", task.row.due))
    task.engine.adopt_runs(task, list(flying), again=again)


def dump(task: Held, *, keep_lease: bool) -> tuple[TaskRow, bool]:
    """The row for what ``task`` became, and whether its run was queued anew.

    The lease (owner, expiry, expiries) is kept with ``keep_lease`` while a
    run is still in flight, and cleared otherwise. O(1).
    """
    plan = task.plan
    assert plan is not None
    old = task.row
    state = plan_state(plan)
    due = task.entry[0]
    if plan.concurrent:  # its lease is kept while any run of it is in flight
        keep_lease = bool(plan.flying)
        head = task.engine.next_time()  # its next run or a run's retry, if either may start
        if keep_lease and (head is None or head != due):
            state["next"] = due
            if head is None:
                state["full"] = True  # nothing may start before a run in flight ends
            else:
                due = head
    spec = old.spec  # specs are replaced, never changed in place: shared, with its JSON
    pending = old.state.get("pending")
    if pending and not plan.pending:  # the engine applied the changes that waited
        spec = applied_spec(spec, pending, plan)
    row = TaskRow(
        old.task_id,
        old.action,
        spec,
        state,
        str(task.status),
        plan.paused,
        due,
        plan.priority,
        old.seq,
        old.fence,
        old.owner if keep_lease else None,
        old.lease_until if keep_lease else None,
        old.expiries if keep_lease else 0,
        spec_text=old.spec_text,
    )
    requeued = task.status is Status.SCHEDULED and task.entry is not task.adopted
    return row, requeued


def slot_of(row: TaskRow) -> Time:
    """The slot of a row's current run: its idempotency key is ``f"{task_id}@{slot!r}"``."""
    state = row.state
    at: Time | None = state.get("nominal")
    if at is None:  # (a concurrent task's row is due at a run's retry: its next slot apart)
        at = state.get("next", row.due)
    return slot_time(state["attempt"], state["first_at"], at, state.get("moved"))


def outcome_row(
    row: TaskRow, outcome: RunOutcome, finished: Time, slot: Time | None = None
) -> OutcomeRow:
    """The stored record of a run of ``row``'s current slot (or of ``slot``, a
    concurrent task's run)."""
    error = outcome.error
    text = None if error is None else error_text(error)
    value = outcome.value
    return new_tuple(  # an OutcomeRow
        OutcomeRow,
        (
            row.task_id,
            slot_of(row) if slot is None else slot,
            outcome.attempt,
            row.fence,
            outcome.at,
            recorded_result(outcome.result, error),
            text,
            outcome.started,
            finished,
            outcome.skipped,
            row.owner,
            None if value is None else value_text(value),
            None if not outcome.skipped else OutcomeRow.skips_text(outcome.skipped_by),
        ),
    )


new_tuple = tuple.__new__
"""How the hot paths build a named tuple from a tuple of all its fields: in C, where
calling the class runs its ``__new__``, a Python function (2,000 instructions, about
half of that, measured)."""


def value_from(text: str | None) -> object:
    """A run's value read back from its stored text: the JSON it was stored as, else the
    text itself (a str value; or the ``repr`` of a value JSON cannot carry, or one cut
    at :data:`VALUE_CHARS`). A str value that is itself JSON text (``"42"``) reads back
    as what it spells. O(len(text))."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def new_row(
    task_id: str,
    action: str,
    spec: dict[str, Any],
    plan: Plan,
    first: Time,
) -> TaskRow:
    """The row of a task just scheduled, its first run at ``first``: added to an engine
    of its own, which decides when that run starts (a jittered task's,
    :func:`~rota._core.policy.jitter_offset` later), as it does in memory. O(1)."""
    engine = Engine(1)
    engine.add(task_id, never, first, plan)
    due = engine.next_time()
    assert due is not None
    return TaskRow(
        task_id, action, spec, plan_state(plan), str(Status.SCHEDULED), False, due, plan.priority
    )


def never(at: Time) -> None:
    """The action of a task restored only to be changed (a scheduling call, a
    completion decided again): it must never run."""
    raise RuntimeError("rota: a task restored only to be changed was run")


class StoredError(Exception):
    """A run's error as read back from a store: its text (the exception itself stayed
    in the process that ran it)."""


def removed(row: TaskRow) -> bool:
    """Whether a task was withdrawn by :meth:`DurableScheduler.remove` (a job its file
    no longer declares) and not declared again since. O(1)."""
    spec = row.spec
    return row.status == Status.CANCELLED and isinstance(spec, dict) and bool(spec.get("removed"))
