"""The API half of a store's table (add, declare, change), each one store
transaction: a change restores the task's row into an engine, applies the engine's
own operation and dumps the row. :mod:`rota.durable._reads` reads the rows;
:class:`~rota.durable.StoredTasks` adds the runner half."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from rota._core import codec as _codec
from rota._core import validate as _validate
from rota._core.calls import prepare
from rota._core.checks import check_stoppable, slot_windows, slots_in, updated_call
from rota._core.events import Event, EventKind
from rota._core.policy import Cursor, Plan, RetryPolicy, Schedule
from rota._core.stored import plan_spec, spec_changes
from rota._core.task import admitted, deferred
from rota._core.types import (
    FINISHED,
    LEASED,
    Status,
    Time,
)
from rota._scheduling.tasks import Tasks
from rota.store import Change, Store, TaskRow

from ._actions import Actions
from ._rows import (
    Held,
    dump,
    never,
    new_row,
    restore,
    slot_of,
)


class Stored(NamedTuple):
    """An action as a store keeps it: its name (registered, or an import path), and
    the task's spec (its arguments as JSON, its schedule and policies as data)."""

    name: str
    spec: dict[str, Any]


class StoredChanges(Tasks):
    """Tasks in a store, as the scheduling API adds, changes and reads them (set up by
    :class:`~rota.durable._tasks.StoredTasks`, the one class of these floors that is
    built).

    Invariant: a row is only ever replaced whole by one transaction that read it
    (``store.modify``); specs are replaced, never changed in place (their JSON and
    decoded policies are shared).
    """

    __slots__ = ("_actions", "_backoff", "_clock", "_node", "_retry", "_store", "_timed")

    _store: Store
    """Where the tasks are (opened by the constructor)."""
    _actions: Actions
    """The actions this node knows (by name)."""
    _retry: RetryPolicy | None
    """The scheduler's default retry policy, stored with each task that brings none
    (``None``: doubling from ``_backoff``)."""
    _backoff: Time
    """The first delay of the default retry policy."""
    _node: str
    """This process's name in leases."""
    _timed: bool
    """Whether time is the store's (a database server's): runners wait on it too, and
    claims and completions read it (asked once: the hot paths make no call for it)."""
    _clock: Callable[[], Time]
    """Epoch seconds: the store's own time where it keeps one, else the given clock."""

    # -- what the runner half knows --------------------------------------------

    @abstractmethod
    def changed(self, task_id: str, row: TaskRow) -> None:
        """A change wrote ``row``: tell the runs held here and the runners."""

    @abstractmethod
    def cancelled_here(self, task_id: Hashable) -> None:
        """The task was cancelled: its run held here only reports."""

    @abstractmethod
    def status_of(self, row: TaskRow) -> Status:
        """A stored task's status as this process sees it."""

    # -- time ------------------------------------------------------------------

    @property
    def clock(self) -> Callable[[], Time]:
        """The clock claims are decided by: the store's, if it keeps time. O(1)."""
        return self._clock

    def store_clock(self) -> Time:
        """The clock of a scheduler whose store keeps time (a database server): the
        store's, so that runners sleep and wake by the time claims are decided by,
        whatever this host's wall clock does."""
        own = self._store.now()
        if own is None:
            raise RuntimeError(f"{self._store!r} stopped keeping time")
        return own

    def store_time(self, now: Time) -> Time:
        """``now`` on the store's clock: the store's own time if it keeps one."""
        if not self._timed:
            return now
        own = self._store.now()
        return now if own is None else own

    def now(self) -> Time:
        """The clock's reading on the store's clock. One read of the store's time
        where it keeps one."""
        return self.store_time(_validate.time_from("the clock", self._clock()))

    # -- adding ----------------------------------------------------------------

    def admit(
        self, task_id: Hashable, action: Any, args: Any, kwargs: Any, plan: Plan | None
    ) -> Stored:
        """A str id; an action a store can name (a registered name, an import path, a
        module-level function); JSON arguments the action can be called with; the
        built-in schedules and retry policies (stored as data). Raises ``TypeError``
        naming what it refuses (a lambda, a nested function: the message says what to
        do). Nothing is stored."""
        if not isinstance(task_id, str):
            raise TypeError(
                f"task_id must be a str for a durable task, got {task_id!r} "
                f"({type(task_id).__name__})"
            )
        name, function = self._actions.reference(action)
        if plan is not None and plan.replace:
            check_stoppable(function)
        stored_args = None if args is None else _codec.json_value("args", args)
        stored_kwargs = None if kwargs is None else _codec.json_value("kwargs", kwargs)
        prepare(function, stored_args, stored_kwargs)  # the call shape, checked now
        assert plan is not None
        spec = {
            "args": stored_args,
            "kwargs": stored_kwargs,
            **plan_spec(plan, self._retry, self._backoff),
        }
        return Stored(name, spec)

    def row(self, task_id: str, first: Time, action: Stored, plan: Plan) -> TaskRow:
        """The row of a new task, ``action`` as :meth:`admit` gave it, with its first
        slot (``spec["origin"]``: its schedule has none before; nothing is stored).
        O(1)."""
        return new_row(task_id, action.name, {**action.spec, "origin": first}, plan, first)

    def add(
        self, task_id: Hashable, first: Time, action: Any, plan: Plan | None, replace: bool | None
    ) -> bool:
        """Store the task, in one transaction (``replace`` ``None``: :meth:`declare`)."""
        assert isinstance(task_id, str)
        assert plan is not None
        if replace is None:
            return self.declare(self.row(task_id, first, action, plan))
        row = self.row(task_id, first, action, plan)
        replaced = False

        def add(old: TaskRow | None) -> Change[bool]:
            nonlocal replaced
            if old is not None and not admitted(old.status not in FINISHED, replace):
                return Change(False)
            if old is not None:
                row.fence = old.fence + 1  # the old task's run in flight is now stale
                replaced = old.status not in FINISHED
            return Change(True, row=row, requeued=True)

        added = self._store_new(row, add)
        if replaced:  # as a cancel: the old task's run in flight here is only reported
            self.cancelled_here(row.task_id)
        return added

    def declare(self, row: TaskRow, owner: str | None = None) -> bool:
        """Make sure the task of ``row`` exists as declared, in one transaction: what
        :meth:`rota.durable.DurableScheduler.ensure` documents (``owner``: who declares
        it; a finished task of an owner comes back when its declaration changed)."""

        def ensure(old: TaskRow | None) -> Change[bool]:
            if old is None:
                return Change(True, row=row, requeued=True)
            if "origin" in old.spec:  # its first slot is the task's, not this declaration's
                row.spec = {**row.spec, "origin": old.spec["origin"]}
            if old.status in FINISHED:
                if owner is None or (old.action == row.action and old.spec == row.spec):
                    return Change(False)
                row.fence = old.fence + 1  # declared anew: a new task under the same id
                return Change(True, row=row, requeued=True)
            same = old.action == row.action and old.priority == row.priority
            if same and old.spec == row.spec:
                return Change(False)
            if old.spec["schedule"] == row.spec["schedule"] and old.spec.get(
                "calendar"
            ) == row.spec.get("calendar"):
                old.action, old.spec, old.priority = row.action, row.spec, row.priority
                return Change(True, row=old)
            task = restore(old, never)
            declared = restore(row, never).plan  # its cursor resumed as every row's is
            assert declared is not None
            task.engine.reschedule(task.task_id, declared.cursor, slot_of(row))
            new, requeued = dump(task, keep_lease=old.status in LEASED)
            new.action, new.spec, new.priority = row.action, row.spec, row.priority
            return Change(True, row=new, requeued=requeued)

        return self._store_new(row, ensure)

    def _store_new(self, row: TaskRow, decide: Callable[[TaskRow | None], Change[bool]]) -> bool:
        """Store a new task's ``row`` as ``decide`` says (one transaction); announce it."""
        decided = self._store.modify(row.task_id, decide)
        assert decided is not None
        if decided.value:
            if self.wakeups:
                self.wake(row.due)
            if self.listeners:
                self.emit(Event(EventKind.TASK_ADDED, row.task_id, row.due))
        return decided.value

    # -- changes ---------------------------------------------------------------

    def apply(
        self, task_id: Hashable, operation: Callable[[Held], bool], event: EventKind | None
    ) -> bool:
        """Apply an engine operation to a stored, unfinished task, in one transaction:
        the row restored, ``operation`` run on it, the row dumped; ``event`` emitted
        if it changed something. ``False`` for an unknown or finished task."""
        if not isinstance(task_id, str):
            return False

        def change(row: TaskRow | None) -> Change[bool]:
            if row is None or row.status in FINISHED:
                return Change(False)
            task = restore(row, never)
            if not operation(task):
                return Change(False)
            new, requeued = dump(task, keep_lease=row.status in LEASED)
            return Change(True, row=new, requeued=requeued)

        decided = self._store.modify(task_id, change)
        changed = decided is not None and decided.value
        if changed:
            assert decided is not None
            assert decided.row is not None
            self.changed(task_id, decided.row)
            if event is not None and self.listeners:
                self.emit(Event(event, task_id))
        return changed

    def cancel(self, task_id: Hashable) -> bool:
        """Cancelled in the store: every process sees it; a run in flight anywhere goes
        on and its completion changes nothing. One transaction."""
        return self.withdraw(task_id, remove=False)

    def withdraw(self, task_id: Hashable, *, remove: bool) -> bool:
        """Cancel the task; with ``remove``, also mark it removed (no longer listed;
        declaring it again adds it anew). One transaction."""

        def cancel(task: Held) -> bool:
            if remove:
                task.row.spec = {**task.row.spec, "removed": True}  # replaced, never changed
            return task.engine.cancel(task.task_id)

        cancelled = self.apply(task_id, cancel, EventKind.TASK_REMOVED)
        if cancelled:
            self.cancelled_here(task_id)
        return cancelled

    def pause(self, task_id: Hashable) -> bool:
        """Paused in the store. One transaction."""
        return self.apply(task_id, lambda t: t.engine.pause(t.task_id), EventKind.TASK_PAUSED)

    def resume(self, task_id: Hashable) -> bool:
        """Resumed in the store. One transaction."""
        return self.apply(task_id, lambda t: t.engine.resume(t.task_id), EventKind.TASK_RESUMED)

    def reschedule(
        self, task_id: Hashable, when: Schedule, cursor: Cursor | None, first: Time
    ) -> bool:
        """The new schedule stored with the task. One transaction."""
        spec = _codec.schedule_spec(when)

        def operation(task: Held) -> bool:
            task.row.spec = {**task.row.spec, "schedule": spec}  # replaced, never changed
            return task.engine.reschedule(task.task_id, cursor, first, when)

        return self.apply(task_id, operation, None)

    def trigger(self, task_id: Hashable) -> bool:
        """An extra run now (the store's time). One transaction."""
        now = self.now()
        return self.apply(task_id, lambda t: t.engine.trigger(t.task_id, now), None)

    def update(self, task_id: Hashable, found: dict[str, object], options: Any) -> bool:
        """The changes stored with the task: every node sees them. A run in flight on
        any node finishes as it began; the changes, stored beside it, apply when its
        completion is committed. ``args``/``kwargs`` must be JSON and fit the action
        (checked where this process knows it). One transaction. Raises ``TypeError``
        for options a store cannot keep."""
        fragment = spec_changes(found)
        if "retry" in found:  # None: the scheduler's default, stored as what it is
            policy: Any = found["retry"] or self._retry
            fragment["retry"] = _codec.retry_spec(policy, self._backoff)
            found["retry"] = _codec.retry_from(fragment["retry"])
        call: dict[str, Any] = {k: options[k] for k in ("args", "kwargs") if k in options}
        for key, value in call.items():
            call[key] = None if value is None else _codec.json_value(key, value)

        def operation(task: Held) -> bool:
            spec = task.row.spec
            # (an action this process does not know is not checked: None)
            function = self._actions.function(task.row.action)
            updated = updated_call(function, found, call, spec["args"], spec["kwargs"])
            if updated is not None:
                spec = {**spec, "args": updated[0], "kwargs": updated[1]}
            # Stored at once unless they wait for the run in flight (then with it, as the
            # plan's pending changes, and in the spec when they apply: see dump)
            if not deferred(task):
                spec = {**spec, **{k: v for k, v in fragment.items() if k != "priority"}}
            task.row.spec = spec  # replaced, never changed in place
            return task.engine.update(task.task_id, found)

        return self.apply(task_id, operation, None)

    def backfill(self, task_id: Hashable, low: Time, high: Time, idle_only: bool) -> int:
        """The slots queued on the task's row, so any node runs them and a node killed
        mid-backfill leaves the rest to the others (each once: fenced as every run). A
        slot that already has a recorded outcome is not run again. One read and one
        transaction."""
        if not isinstance(task_id, str):
            return 0
        done = self._store.recorded(task_id, low, high)
        queued = 0

        def operation(task: Held) -> bool:
            nonlocal queued
            assert task.plan is not None
            every = slots_in(task.plan, low, high)
            slots = [slot for slot in every if slot not in done]
            windows = slot_windows(task.plan, every)
            queued = task.engine.backfill(
                task.task_id, slots, idle_only=idle_only, windows=windows
            )
            return queued > 0

        self.apply(task_id, operation, None)
        return queued
