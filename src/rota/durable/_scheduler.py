"""DurableScheduler: the Scheduler API over a durable store."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar, Unpack

from rota import _validate
from rota._calls import prepare
from rota._engine import task_info
from rota._events import Event, EventKind
from rota._policy import RetryOn, RetryPolicy, Schedule
from rota._scheduler import (
    MONOTONIC_CLOCKS,
    Clock,
    Scheduler,
    TaskOptions,
    backfill_overlap,
    changes,
    check_end,
    check_stoppable,
    controls,
    make_plan,
    slots_in,
    window,
)
from rota._types import (
    FINISHED,
    LEASED,
    NO_SKIPS,
    RunOutcome,
    Status,
    TaskInfo,
    Time,
    result_of,
)
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.schedules import FixedRate, Once
from rota.store import Change, OutcomeRow, Store, StoreError, TaskRow

from . import _codec
from ._actions import Actions
from ._rows import (
    Held,
    dump,
    never,
    new_row,
    overlap_spec,
    restore,
    slot_of,
    spec_of,
    value_from,
)
from ._tasks import StoredTasks

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

F = TypeVar("F", bound=Callable[..., Any])
_UNSET: Any = object()


class DurableScheduler(Scheduler):
    """A :class:`~rota.Scheduler` whose tasks live in a durable store.

    Same API, same meaning (retries, backoff, misfire policies, priorities,
    pause, the six statuses, ``tick`` for tests, every runner in real time);
    what changes is durability: once a ``schedule*`` call returns, the task
    is in ``store`` and survives restarts and ``kill -9``; any number of
    processes may share the store, each slot's completion is recorded once,
    and a run held by a dead process is taken over once its lease expires.
    Read ``docs/durability.md`` for the guarantees.

    What changes for tasks: ids are str; an action is a registered name
    (:meth:`register`), an import path ``"package.module:function"``, or a
    module-level function (stored as its import path); ``args``/``kwargs``
    are JSON; schedules, retry policies and ``retry_on`` are the built-in
    ones. Each is checked when scheduling.

    ``clock`` must read epoch seconds (``time.time``, the default, or a
    :class:`~rota.ManualClock` in tests); a monotonic clock is refused.
    ``node`` names this process in leases (default: host, pid and a random
    suffix); ``lease`` (seconds) is how long a claimed run is held without a
    heartbeat (renewed every ``lease / 3`` while a runner runs); ``poll``
    (seconds) is how often a runner looks for other processes' writes;
    ``batch`` the most runs claimed at once (a runner without a pool claims
    as many as it is expected to start within ``poll`` seconds, at the pace
    of its previous claims, so claimed runs wait no longer than other nodes
    would take to see them; one with a pool, as many as its workers can take
    soon); ``max_expiries`` the leases of
    one run that may expire (crashed or stalled holders) before it fails
    with :class:`LeaseExpired`; ``group_commit`` has a runner's completions
    committed together: a batch's, by a dispatcher that runs its claims
    itself, before it claims the next; those of a pool's workers, on a
    thread of their own, those that queue meanwhile in one transaction (see
    :meth:`StoredTasks.complete_later`; ``False``: each on the thread that ran it, one
    commit per completion). ``imports`` says which stored import paths this node
    runs, since whoever can write the store could name any (``docs/security.md``):
    by default only those this process stored itself (scheduled, ensured, declared
    by its job file) besides its registered names; ``True``: any it can import; a
    collection of prefixes (``["billing.", "reports.tasks:"]``): those starting
    with one. Tasks of other paths are left, untouched, to nodes that run them.

    Costs: each scheduling call, claim and completion is one store
    transaction (with :class:`~rota.store.SQLiteStore` and
    ``synchronous=FULL``, one fsync); queries read one row, or the earliest
    rows through an index.

    Raises ``TypeError``/``ValueError`` for bad arguments (a monotonic clock
    included), and what ``store.open()`` raises.
    """

    __slots__ = ("_actions", "_node", "_store", "_stored")

    def __init__(
        self,
        store: Store,
        clock: Clock = time.time,
        backoff: Time = 1,
        *,
        retry: RetryPolicy | None = None,
        node: str | None = None,
        lease: Time | timedelta = 30.0,
        poll: Time | timedelta = 0.1,
        batch: int = 128,
        max_expiries: int = 3,
        group_commit: bool = True,
        imports: bool | Collection[str] = False,
    ) -> None:
        if clock in MONOTONIC_CLOCKS:
            raise ValueError(
                f"clock {clock!r} is monotonic: its readings mean nothing to another process "
                "or after a restart; a durable scheduler needs epoch time (time.time, the default)"
            )
        super().__init__(clock, backoff, retry=retry, epoch=True)
        for method in (
            "modify",
            "claim",
            "heartbeat",
            "next_due",
            "get",
            "rows",
            "outcomes",
            "release",
            "complete_and_claim",
        ):
            if not callable(getattr(store, method, None)):
                raise TypeError(f"store must be a rota store (with {method}()), got {store!r}")
        lease = _validate.positive("lease", lease)
        poll = _validate.positive("poll", poll)
        if _validate.count("batch", batch) < 1:
            raise ValueError(f"batch must be >= 1, got {batch!r}")
        _validate.count("max_expiries", max_expiries)
        if not isinstance(group_commit, bool):
            raise TypeError(f"group_commit must be a bool, got {group_commit!r}")
        if node is not None and not isinstance(node, str):
            raise TypeError(f"node must be a str, got {node!r}")
        self._node = node or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._actions = Actions(imports)
        self._store = store
        # The table: where the tasks live and what runners drive (opens the store)
        self._stored = StoredTasks(
            store, self._lock, clock, self._actions, node=self._node, lease=lease, poll=poll,
            batch=batch, max_expiries=max_expiries, group_commit=group_commit,
        )  # fmt: skip
        self._table = self._stored
        self._clock = self._stored.clock  # the store's, if it keeps time

    def __repr__(self) -> str:
        return f"<DurableScheduler store={self._store!r} node={self._node!r}>"

    @property
    def store(self) -> Store:
        """The store this scheduler keeps its tasks in."""
        return self._store

    @property
    def node(self) -> str:
        """This process's name in leases."""
        return self._node

    # -- actions ---------------------------------------------------------

    def register(self, name: str, action: F) -> F:
        """Let tasks of this scheduler run ``action`` under ``name``; returns ``action``.

        Every process that shares the store and should run such tasks
        registers the same name; a process that does not know a name never
        claims its tasks (they wait, untouched, for one that does). O(1).
        Raises ``TypeError`` for a non-str name or a non-callable action,
        ``ValueError`` for an empty name, one with ``:`` (that is an import
        path) or one registered to another function.
        """
        self._actions.register(name, action)
        return action

    def action(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`register`: ``@scheduler.action("billing.sync")``."""

        def decorate(action: F) -> F:
            return self.register(name, action)

        return decorate

    def _reference(self, action: object) -> tuple[str, Callable[..., object]]:
        """The stored name of an action and the function it names, or ``TypeError``."""
        return self._actions.reference(action)

    def _declare_job(
        self,
        name: Hashable,
        when: Schedule,
        action: Callable[..., object],
        replace_existing: bool,
        options: dict[str, Any],
    ) -> None:
        """``@scheduler.job`` on a durable scheduler: :meth:`ensure`, so a restart (or
        another worker) keeps the stored task's cursor instead of starting it over."""
        if not isinstance(name, str):
            raise TypeError(f"task_id must be a str for a durable task, got {name!r}")
        self.ensure(name, when, action, **options)

    # -- scheduling ------------------------------------------------------

    def schedule_once(
        self,
        task_id: Hashable,
        delay: Time | timedelta,
        action: Any,
        max_retries: int = 0,
        **options: Unpack[TaskOptions],
    ) -> bool:
        """As :meth:`rota.Scheduler.schedule_once`, stored (see the class docstring)."""
        return self.schedule(
            task_id,
            Once(_validate.delay("delay", delay)),
            action,
            max_retries=max_retries,
            **options,
        )

    def schedule_at_fixed_rate(
        self,
        task_id: Hashable,
        initial_delay: Time | timedelta,
        period: Time | timedelta,
        action: Any,
        max_retries: int = 0,
        **options: Any,
    ) -> bool:
        """As :meth:`rota.Scheduler.schedule_at_fixed_rate`, stored."""
        initial_delay = _validate.delay("initial_delay", initial_delay)
        period = _validate.positive("period", period)
        when = FixedRate(period, delay=initial_delay)
        return self.schedule(task_id, when, action, max_retries=max_retries, **options)

    def schedule(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        retry_on: RetryOn | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
        replace_existing: bool = False,
        overlap: Overlap | None = None,
        deadline: Time | timedelta | None = None,
        jitter: Time | timedelta | None = None,
        end: Time | datetime | None = None,
        max_runs: int | None = None,
    ) -> bool:
        """As :meth:`rota.Scheduler.schedule`; the task is stored when this returns.

        ``action`` is a registered name, ``"module:function"``, or a function
        defined at module level (stored as its import path). Raises, besides
        what ``Scheduler.schedule`` raises, ``TypeError`` for a non-str
        ``task_id``, an action it cannot store by name (a lambda, a nested
        function: the message says what to do), arguments that are not JSON,
        a schedule or retry policy that is not a built-in one. Nothing is
        stored when it raises.
        """
        row = self._row(task_id, when, action, args, kwargs, max_retries, retry, retry_on,
                        misfire, priority, (overlap, deadline, jitter, end, max_runs))  # fmt: skip

        replaced = False

        def add(old: TaskRow | None) -> Change[bool]:
            nonlocal replaced
            if old is not None and old.status not in FINISHED and not replace_existing:
                return Change(False)
            if old is not None:
                row.fence = old.fence + 1  # the old task's run in flight is now stale
                replaced = old.status not in FINISHED
            return Change(True, row=row, requeued=True)

        added = self._declare(row, add)
        if replaced:  # as a cancel: the old task's run in flight here is only reported
            self._stored.cancelled_here(row.task_id)
        return added

    def ensure(
        self,
        task_id: str,
        when: Schedule,
        action: Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        retry_on: RetryOn | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
        owner: str | None = None,
        zone: str | None = None,
        overlap: Overlap | None = None,
        deadline: Time | timedelta | None = None,
        jitter: Time | timedelta | None = None,
        end: Time | datetime | None = None,
        max_runs: int | None = None,
    ) -> bool:
        r"""Make sure a task exists as declared: for tasks declared at every start-up.

        Idempotent across processes and restarts, so N workers (gunicorn)
        that all call it at start-up give one task, not N: absent, the task
        is added; present and unfinished with the same declaration, nothing
        changes (its cursor, retries and lease are kept); present with
        another declaration, the declaration is updated (a new schedule
        takes over as :meth:`reschedule` does; its run in flight goes on);
        finished (done, failed, or cancelled by someone), it is left alone.
        Returns ``True`` if it added or changed the task. Arguments and
        errors are :meth:`schedule`'s. One transaction.

        ``owner`` names who declares the task (``rota run`` gives its job
        file's path): it is stored with the task (``spec["owner"]`` of its row), and a
        finished task of a declaring owner comes back, as a new task, when its
        declaration changed (a job cancelled, or :meth:`remove`\ d, then edited
        or declared again); with the same declaration it stays finished.

        ``zone`` (an IANA name, ``"Europe/Berlin"``) is the zone the task's
        times are shown in by the command and the dashboard (``spec["zone"]``,
        :attr:`Entry.zone`); it changes nothing about when the task runs.
        """
        row = self._row(task_id, when, action, args, kwargs, max_retries, retry, retry_on,
                        misfire, priority, (overlap, deadline, jitter, end, max_runs))  # fmt: skip
        for name, value in (("owner", owner), ("zone", zone)):
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise TypeError(f"{name} must be a non-empty str or None, got {value!r}")
                row.spec[name] = value

        def ensure(old: TaskRow | None) -> Change[bool]:
            if old is None:
                return Change(True, row=row, requeued=True)
            if old.status in FINISHED:
                if owner is None or (old.action == row.action and old.spec == row.spec):
                    return Change(False)
                row.fence = old.fence + 1  # declared anew: a new task under the same id
                return Change(True, row=row, requeued=True)
            same = old.action == row.action and old.priority == row.priority
            if same and old.spec == row.spec:
                return Change(False)
            if old.spec["schedule"] == row.spec["schedule"]:
                old.action, old.spec, old.priority = row.action, row.spec, row.priority
                return Change(True, row=old)
            task = restore(old, _never)
            stored = row.state["cursor"]
            schedule: Any = _codec.schedule_from(row.spec["schedule"])
            cursor = None if stored is None else schedule.resume(stored[0])
            task.engine.reschedule(task.task_id, cursor, slot_of(row))
            new, requeued = dump(task, keep_lease=old.status in LEASED)
            new.action, new.spec, new.priority = row.action, row.spec, row.priority
            return Change(True, row=new, requeued=requeued)

        return self._declare(row, ensure)

    def remove(self, task_id: Hashable) -> bool:
        """Withdraw a task's declaration: it is cancelled as :meth:`cancel` does (a run
        in flight finishes; its history stays readable) and marked removed: no longer
        listed (:meth:`listing`), and declaring it again (:meth:`ensure` with an
        ``owner``) adds it anew. What ``rota run`` does to the jobs its file no
        longer declares. ``False`` if the task is unknown or finished. One
        transaction.
        """
        if not isinstance(task_id, str):
            return False

        def withdraw(task: Held) -> bool:
            task.row.spec = {**task.row.spec, "removed": True}  # replaced, never changed
            return task.engine.cancel(task.task_id)

        removed = self._apply(task_id, withdraw, None)
        if removed:
            self._stored.cancelled_here(task_id)
            if self._table.listeners:
                self._table.emit(Event(EventKind.TASK_REMOVED, task_id))
        return removed

    def _row(
        self,
        task_id: Hashable,
        when: Schedule,
        action: Any,
        args: Any,
        kwargs: Any,
        max_retries: int,
        retry: RetryPolicy | None,
        retry_on: RetryOn | None,
        misfire: Misfire | None,
        priority: int,
        control: tuple[Any, Any, Any, Any, Any] = (None, None, None, None, None),
    ) -> TaskRow:
        """Check everything a new task needs and build its row (nothing is stored);
        ``control`` is ``(overlap, deadline, jitter, end, max_runs)``."""
        if not isinstance(task_id, str):
            raise TypeError(
                f"task_id must be a str for a durable task, got {task_id!r} "
                f"({type(task_id).__name__})"
            )
        name, function = self._reference(action)
        _validate.count("max_retries", max_retries)
        plan = make_plan(None, max_retries, retry, misfire, priority, retry_on)  # validates
        if isinstance(when, Once) and misfire is not None:
            raise ValueError(f"misfire applies to recurring schedules, not {when!r}")
        overlap, deadline, jitter, end, max_runs = control
        controls(plan, when, overlap, deadline, jitter, self._end(end), max_runs)
        if plan.replace:
            check_stoppable(function)
        stored_args = None if args is None else _codec.json_value("args", args)
        stored_kwargs = None if kwargs is None else _codec.json_value("kwargs", kwargs)
        prepare(function, stored_args, stored_kwargs)  # the call shape, checked now
        spec = {
            "args": stored_args,
            "kwargs": stored_kwargs,
            "schedule": _codec.schedule_spec(when),
            "max_retries": max_retries,
            "retry": _codec.retry_spec(retry or self._engine._retry, self._engine._backoff),
            "retry_on": _codec.retry_on_spec(retry_on),
            "misfire": None if misfire is None else misfire.limit,
        }
        for key, value in (
            ("overlap", overlap_spec(plan)), ("deadline", plan.deadline),
            ("jitter", plan.jitter), ("end", plan.end), ("max_runs", plan.max_runs),
        ):  # fmt: skip
            if value is not None:  # stored only when set: rows without them stay as they were
                spec[key] = value
        cursor, first = self._first(when)
        check_end(plan, first)
        plan.cursor = cursor
        return new_row(task_id, name, spec, plan, first)

    def _declare(self, row: TaskRow, decide: Callable[[TaskRow | None], Change[bool]]) -> bool:
        """Store a new task's ``row`` as ``decide`` says (one transaction); announce it."""
        decided = self._store.modify(row.task_id, decide)
        assert decided is not None
        if decided.value:
            self._added(row)
        return decided.value

    def _added(self, row: TaskRow) -> None:
        if self._table.wakeups:
            self._table.wake(row.due)
        if self._table.listeners:
            self._table.emit(Event(EventKind.TASK_ADDED, row.task_id, row.due))

    # -- changes -----------------------------------------------------------

    def _apply(
        self, task_id: Hashable, operation: Callable[[Held], bool], event: EventKind | None
    ) -> bool:
        """Apply an engine operation to a stored, unfinished task, in one transaction."""
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
            self._stored.changed(task_id, decided.row)
            if event is not None and self._table.listeners:
                self._table.emit(Event(event, task_id))
        return changed

    def cancel(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.cancel`, in the store: every process sees it.

        A run in flight anywhere goes on (cooperative); its completion is
        recorded and changes nothing. One transaction.
        """
        cancelled = self._apply(task_id, lambda t: t.engine.cancel(t.task_id), None)
        if cancelled:
            self._stored.cancelled_here(task_id)
            if self._table.listeners:
                self._table.emit(Event(EventKind.TASK_REMOVED, task_id))
        return cancelled

    def pause(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.pause`, in the store. One transaction."""
        return self._apply(task_id, lambda t: t.engine.pause(t.task_id), EventKind.TASK_PAUSED)

    def resume(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.resume`, in the store. One transaction."""
        return self._apply(task_id, lambda t: t.engine.resume(t.task_id), EventKind.TASK_RESUMED)

    def reschedule(self, task_id: Hashable, when: Schedule) -> bool:
        """As :meth:`rota.Scheduler.reschedule`, in the store. One transaction."""
        spec = _codec.schedule_spec(when)
        cursor, first = self._first(when)

        def operation(task: Held) -> bool:
            task.row.spec = {**task.row.spec, "schedule": spec}  # replaced, never changed
            return task.engine.reschedule(task.task_id, cursor, first, when)

        return self._apply(task_id, operation, None)

    def update(self, task_id: Hashable, **options: Any) -> bool:
        """As :meth:`rota.Scheduler.update`, in the store: every node sees it. A run
        in flight on any node finishes as it began; the changes, stored beside it,
        apply when its completion is committed. ``args``/``kwargs`` must be JSON and
        fit the action (checked against it where this process knows it). One
        transaction. Raises, besides what ``Scheduler.update`` raises, what
        :meth:`schedule` raises for options a store cannot keep."""
        found = changes(options)
        fragment = spec_of(found)
        if "retry" in found:  # None: the scheduler's default, stored as what it is
            fragment["retry"] = _codec.retry_spec(
                found["retry"] or self._engine._retry,  # type: ignore[arg-type]
                self._engine._backoff,
            )
            found["retry"] = _codec.retry_from(fragment["retry"])
        call: dict[str, Any] = {k: options[k] for k in ("args", "kwargs") if k in options}
        for key, value in call.items():
            call[key] = None if value is None else _codec.json_value(key, value)

        def operation(task: Held) -> bool:
            spec = task.row.spec
            function = self._actions.function(task.row.action) if found.get("replace") else None
            if function is not None:  # (an action this process does not know: not checked)
                check_stoppable(function)
            if call:
                new: dict[str, Any] = {**spec, **call}
                function = self._actions.function(task.row.action)
                if function is not None:
                    prepare(function, new["args"], new["kwargs"])  # the call shape
                spec = new
            assert task.plan is not None
            # Stored at once unless a run in flight is to finish as it began (a concurrent
            # task's changes apply at once: its runs are rebuilt from the spec)
            if task.status not in LEASED or task.plan.concurrent:
                spec = {**spec, **{k: v for k, v in fragment.items() if k != "priority"}}
            task.row.spec = spec  # replaced, never changed in place
            return task.engine.update(task.task_id, found)

        return self._apply(task_id, operation, None)

    def backfill(
        self,
        task_id: Hashable,
        start: Time | datetime,
        end: Time | datetime,
        *,
        overlap: Overlap | None = None,
    ) -> int:
        """As :meth:`rota.Scheduler.backfill`, in the store: the slots are queued on
        the task's row, so any node runs them and a node killed mid-backfill leaves
        the rest to the others (each once: fenced as every run). A slot that already
        has a recorded outcome (:meth:`history`) is not run again. One read and one
        transaction."""
        low, high = window(self._end(start), self._end(end))
        idle_only = backfill_overlap(overlap)
        if not isinstance(task_id, str):
            return 0
        done = self._store.recorded(task_id, low, high)
        queued = 0

        def operation(task: Held) -> bool:
            nonlocal queued
            assert task.plan is not None
            slots = [slot for slot in slots_in(task.plan, low, high) if slot not in done]
            queued = task.engine.backfill(task.task_id, slots, idle_only=idle_only)
            return queued > 0

        self._apply(task_id, operation, None)
        return queued

    def trigger(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.trigger`, in the store (now is the store's
        time). One transaction."""
        now = self._stored.store_time(_validate.time_from("the clock", self._clock()))
        return self._apply(task_id, lambda t: t.engine.trigger(t.task_id, now), None)

    # -- queries -----------------------------------------------------------

    def status(self, task_id: Hashable) -> Status | None:
        """As :meth:`rota.Scheduler.status`; finished tasks stay until pruned. One read."""
        row = self._store.get(task_id) if isinstance(task_id, str) else None
        return None if row is None else self._stored.status_of(row)

    def is_paused(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.is_paused`. One read."""
        row = self._store.get(task_id) if isinstance(task_id, str) else None
        return row is not None and row.paused and row.status not in FINISHED

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """As :meth:`rota.Scheduler.info` (``last_outcome`` from the stored history).

        The outcome's ``error`` is a :class:`StoredError` with the stored text.
        Two reads.
        """
        row = self._store.get(task_id) if isinstance(task_id, str) else None
        if row is None:
            return None
        last = self._store.outcomes(row.task_id, 1) if row.status not in FINISHED else None
        return self._info(row, last[0] if last else None)

    def tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskInfo]:
        """As :meth:`rota.Scheduler.tasks`: the unfinished stored tasks, by id.

        Paged for large stores: up to ``limit`` tasks (all: ``None``) whose ids
        come after ``after`` (pass the last id of a page to get the next). One
        query, linear in the rows returned (finished rows passed over included).
        A row this process cannot read (corrupt JSON, a schedule kind a newer
        rota wrote) is listed with ``schedule`` ``None`` (and ``attempt`` 0 if
        its state is unreadable): one bad row hides no other. Raises
        ``ValueError`` for a ``limit`` below 1.
        """
        return [entry.info for entry in self.listing(after=after, limit=limit, unfinished=True)]

    def listing(
        self, *, after: str | None = None, limit: int | None = None, unfinished: bool = False
    ) -> list[Entry]:
        """Every stored task (only unfinished ones with ``unfinished``), by id, paged as
        :meth:`tasks` is: for each an :class:`Entry`, its :class:`~rota.TaskInfo`
        (by the rule ``info`` follows) with its latest stored outcome, which a
        finished task keeps too, and why its row cannot be read here, if it cannot.
        Tasks withdrawn by :meth:`remove` are not listed (their history stays
        readable through :meth:`history`). What the command's ``status``, the API and
        the pages show. One query, linear in the rows returned (one more for a page
        that removed tasks left short). Raises as :meth:`tasks` does.
        """
        if limit is not None and _validate.count("limit", limit) < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit!r}")
        if after is not None and not isinstance(after, str):
            raise TypeError(f"after must be a task id (str) or None, got {after!r}")
        entries: list[Entry] = []
        while True:
            page = self._store.page(after, limit, unfinished=unfinished)
            entries += [
                Entry(
                    self._info(row, last),
                    last,
                    row.unreadable,
                    zone_of(row),
                    row.owner,
                    row.lease_until,
                    row.expiries,
                    row.due,
                )
                for row, last in page
                if not removed(row)
            ]
            if limit is None or len(page) < limit or len(entries) >= limit:
                return entries[:limit]
            after = page[-1][0].task_id

    def history(self, task_id: str, limit: int = 20) -> list[OutcomeRow]:
        """The task's latest ``limit`` recorded runs, newest first. One read."""
        _validate.count("limit", limit)
        return self._store.outcomes(task_id, limit)

    def prune(self, before: Time, *, batch: int = 10_000) -> int:
        """Delete the record of the past: the outcomes of runs that finished before
        ``before`` (epoch seconds, or an aware ``datetime``), then the rows of finished
        tasks (done, failed, cancelled) due before it with no outcome left. Returns
        how many rows went.

        Unfinished tasks and recent outcomes are untouched; a pruned task is as if it
        never existed (``status`` returns ``None``, ``ensure`` creates it anew). Runs
        in transactions of at most ``batch`` deletions each, so other processes keep
        working meanwhile. Costs: outcomes have no index on their finish time, so
        each transaction scans them (run it from a maintenance job, not per run).
        Raises ``TypeError``/``ValueError`` for a ``before`` that is not a finite
        number or aware datetime, or a ``batch`` that is not a positive int.
        """
        before = _validate.finite("before", before)
        _validate.count("batch", batch)
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch!r}")
        total = 0
        while True:
            gone = self._store.prune(before, batch)
            total += gone
            if gone == 0:
                return total

    def next_run_time(self, task_id: Hashable = _UNSET) -> Time | None:
        """As :meth:`rota.Scheduler.next_run_time`, over the store.

        Without ``task_id`` it also counts when another node's lease expires
        (its run may then be taken over). One indexed read.
        """
        if task_id is _UNSET:
            return self._store.next_due(self._node, self._actions.known())
        info = self.info(task_id)
        return None if info is None else info.next_run_time

    def _info(self, row: TaskRow, o: OutcomeRow | None) -> TaskInfo:
        """What ``info`` shows of a stored task, ``o`` its latest outcome: built by the
        one rule the in-memory scheduler uses (:func:`rota._engine.task_info`). O(1)."""
        status = self._stored.status_of(row)
        outcome = None
        if o is not None and status not in FINISHED:
            error = None if o.error is None else StoredError(o.error)
            started = o.finished if o.started is None else o.started
            outcome = RunOutcome(
                row.task_id, o.at, result_of(o.result), error, o.attempt, started, o.skipped,
                value_from(o.value), o.skips() if o.skipped_by else NO_SKIPS,
            )  # fmt: skip
        try:
            schedule = None if row.unreadable else _codec.schedule_from(row.spec["schedule"])
        except StoreError:  # a kind a newer rota wrote (see _refuse)
            schedule = None
        due = row.state.get("next", row.due)  # a concurrent task's next slot, not a retry
        return task_info(
            row.task_id, status, row.paused, due, schedule, row.state.get("attempt", 0),
            row.due if row.unreadable else slot_of(row), outcome,
        )  # fmt: skip

    # -- binding a schedule ---------------------------------------------------

    def _first(self, when: Schedule, now: Time | None = None) -> tuple[Any, Time]:
        """As the in-memory scheduler binds a schedule, on the store's clock."""
        if now is None:
            now = self._stored.store_time(_validate.time_from("the clock", self._clock()))
        return super()._first(when, now)


class Entry(NamedTuple):
    """A stored task as :meth:`DurableScheduler.listing` lists it."""

    info: TaskInfo
    last: OutcomeRow | None
    """Its latest recorded run (finished tasks keep theirs), or ``None``."""
    unreadable: str | None
    """Why this process cannot read its stored row, or ``None``."""
    zone: str | None = None
    """The zone its times are shown in (``ensure(..., zone=)``), or ``None``."""
    owner: str | None = None
    """The node that holds its run now, or ``None``."""
    lease_until: Time | None = None
    """When that node's lease runs out, or ``None``."""
    takeovers: int = 0
    """How many times a lease of its runs ran out and the run was taken over."""
    due: Time | None = None
    """The time of its current run (while one is held: the run the lease is for)."""


def zone_of(row: TaskRow) -> str | None:
    """The zone a task's times are shown in: the one stored with it (``ensure(...,
    zone=)``, a job file's ``tz``), else its cron schedule's own (a library task
    ``Cron(..., tz="Europe/Berlin")``), else ``None`` (this machine's). O(1)."""
    spec = row.spec if isinstance(row.spec, dict) else {}
    zone = spec.get("zone")
    if zone is None:
        schedule = spec.get("schedule")
        if isinstance(schedule, dict) and schedule.get("kind") == "cron":
            zone = schedule.get("tz")
    return zone if isinstance(zone, str) else None


def removed(row: TaskRow) -> bool:
    """Whether a task was withdrawn by :meth:`DurableScheduler.remove` (a job its file
    no longer declares) and not declared again since. O(1)."""
    spec = row.spec
    return row.status == Status.CANCELLED and isinstance(spec, dict) and bool(spec.get("removed"))


class StoredError(Exception):
    """A run's error as read back from a store: its text (the exception itself stayed
    in the process that ran it)."""


def _never(at: Time) -> None:
    raise RuntimeError("rota: a task restored only to be changed was run")
