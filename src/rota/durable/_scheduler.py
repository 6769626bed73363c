"""DurableScheduler: the Scheduler API over a durable store."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple, TypeVar, Unpack

from rota import _validate
from rota._calls import Bound, prepare
from rota._engine import Engine, Run, Task, raiser, run_at, run_slot, task_info
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
    fatal,
    make_plan,
    slots_in,
    window,
)
from rota._types import (
    CLAIMED,
    FINISHED,
    LEASED,
    NO_SKIPS,
    RELEASED,
    Action,
    GivenBack,
    Result,
    RunOutcome,
    Status,
    TaskInfo,
    Time,
    epoch_shown,
    result_of,
)
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.schedules import FixedRate, Once
from rota.store import Change, Edit, OutcomeRow, Store, StoreError, TaskRow

from . import _codec
from ._actions import Actions
from ._commit import Committed, Completion, GroupCommit
from ._rows import (
    Held,
    dump,
    new_row,
    new_tuple,
    outcome_row,
    overlap_spec,
    restore,
    slot_of,
    spec_of,
    state_of,
    value_from,
)

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

F = TypeVar("F", bound=Callable[..., Any])
_UNSET: Any = object()


STORE_RETRY = 1.0
"""Seconds a runner waits before trying an unreachable store again."""

FAILURE_REPEAT = 60.0
"""Seconds before the same store error is logged again."""


class LeaseExpired(Exception):  # noqa: N818 - it names the event, as TimeoutError does
    """A run's lease expired ``max_expiries`` times: its holders kept dying or stalling.

    The run fails with this error (retried per the task's policy, like any
    failure) instead of being started again forever.
    """


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
    :meth:`_complete_later`; ``False``: each on the thread that ran it, one
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

    _leases = True

    __slots__ = (
        "_actions",
        "_batch",
        "_buffer",
        "_commits",
        "_engines",
        "_failure",
        "_flying",
        "_group",
        "_held",
        "_hold",
        "_keeper",
        "_keeper_stop",
        "_lease",
        "_max_expiries",
        "_node",
        "_outage",
        "_pace",
        "_pace_from",
        "_poll",
        "_stalled_error",
        "_store",
        "_timed",
        "_unwritten",
        "_users",
    )

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
        self._lease = _validate.positive("lease", lease)
        self._poll = _validate.positive("poll", poll)
        if _validate.count("batch", batch) < 1:
            raise ValueError(f"batch must be >= 1, got {batch!r}")
        self._batch = batch
        self._max_expiries = _validate.count("max_expiries", max_expiries)
        if not isinstance(group_commit, bool):
            raise TypeError(f"group_commit must be a bool, got {group_commit!r}")
        self._group = group_commit
        if node is not None and not isinstance(node, str):
            raise TypeError(f"node must be a str, got {node!r}")
        self._node = node or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._actions = Actions(imports)
        self._store = store
        self._hold = threading.Lock()  # guards the buffer and the held runs
        self._buffer: deque[Held | Run] = deque()  # claimed, not yet handed to a driver
        self._held: dict[str, Held] = {}  # claimed by this node, not yet completed
        # Engines of completed runs, reset, for claims to come: at most as many as runs
        # were held here at once
        self._engines: list[Engine] = []
        # Concurrent tasks (Overlap.allow(n), REPLACE) whose lease this node holds while
        # runs of theirs are in flight: when it may start another (None: not before one
        # of those ends). Their leases are in _held, as the first run claimed them.
        self._flying: dict[str, tuple[int, Time | None]] = {}  # (row version, when)
        self._users = 0  # runners driving this scheduler
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()
        # Runners' completions, waiting for the committer thread (see _complete_later)
        self._commits = GroupCommit(store, batch, self._recorded)
        self._outage = False  # the store failed a runner's claim: retry after STORE_RETRY
        self._unwritten = False  # a completion could not be recorded since the last that was
        self._stalled_error = ""  # the last failure of end_stalled, said once
        self._failure: tuple[str, float] | None = None  # the last store error logged, when
        self._pace = 1  # runs a runner without a pool claims next (see _paced)
        self._pace_from: tuple[Time, int, int] | None = None
        store.open()
        # Whether time is the store's (a database server's): runners wait on it too, and
        # claims and completions read it (asked once: the hot paths make no call for it)
        self._timed = store.now() is not None
        if self._timed:
            self._clock = self._store_clock

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
            self._cancelled_here(row.task_id)
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
            self._cancelled_here(task_id)
            if self._listeners:
                self._emit(Event(EventKind.TASK_REMOVED, task_id))
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
        if self._wakeups:
            self._wake(row.due)
        if self._listeners:
            self._emit(Event(EventKind.TASK_ADDED, row.task_id, row.due))

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
            task = restore(row, _never)
            if not operation(task):
                return Change(False)
            new, requeued = dump(task, keep_lease=row.status in LEASED)
            return Change(True, row=new, requeued=requeued)

        decided = self._store.modify(task_id, change)
        changed = decided is not None and decided.value
        if changed:
            assert decided is not None
            assert decided.row is not None
            if task_id in self._flying:  # a concurrent task held here: when it may go on
                self._track(task_id, decided.row, decided.row.fence)
            if self._wakeups:
                self._wake(decided.row.due)
            if event is not None and self._listeners:
                self._emit(Event(event, task_id))
        return changed

    def cancel(self, task_id: Hashable) -> bool:
        """As :meth:`rota.Scheduler.cancel`, in the store: every process sees it.

        A run in flight anywhere goes on (cooperative); its completion is
        recorded and changes nothing. One transaction.
        """
        cancelled = self._apply(task_id, lambda t: t.engine.cancel(t.task_id), None)
        if cancelled:
            self._cancelled_here(task_id)
            if self._listeners:
                self._emit(Event(EventKind.TASK_REMOVED, task_id))
        return cancelled

    def _cancelled_here(self, task_id: Hashable) -> None:
        """The task's run held by this node (if any) belongs to a cancelled task: it
        does not start, and its completion is only reported (as in memory)."""
        with self._hold:
            held = self._held.get(task_id)  # type: ignore[call-overload]
            if held is not None:
                held.cancelled = True

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
        now = self._store_time(_validate.time_from("the clock", self._clock()))
        return self._apply(task_id, lambda t: t.engine.trigger(t.task_id, now), None)

    # -- queries -----------------------------------------------------------

    def status(self, task_id: Hashable) -> Status | None:
        """As :meth:`rota.Scheduler.status`; finished tasks stay until pruned. One read."""
        row = self._store.get(task_id) if isinstance(task_id, str) else None
        return None if row is None else self._status(row)

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

    def _wake_time(self) -> Time | None:
        """When a runner must look again: :meth:`next_run_time`, or the expiry of a
        lease of this node's own if sooner (a run whose completion it could not
        record stays leased to it: a lone node must wake to run it again). An
        unreachable store means "try again in :data:`STORE_RETRY` seconds"."""
        if not self._outage:
            try:
                head = self._store.next_due(self._node, self._actions.known(), own=True)
            except Exception as exc:
                self._store_failed(exc)
            else:
                mine = self._flying_head()
                return head if mine is None or (head is not None and head <= mine) else mine
        return _validate.time_from("the clock", self._clock()) + STORE_RETRY

    def _status(self, row: TaskRow) -> Status:
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

    def _info(self, row: TaskRow, o: OutcomeRow | None) -> TaskInfo:
        """What ``info`` shows of a stored task, ``o`` its latest outcome: built by the
        one rule the in-memory scheduler uses (:func:`rota._engine.task_info`). O(1)."""
        status = self._status(row)
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

    # -- running -----------------------------------------------------------

    def tick(self, now: Time) -> list[RunOutcome]:
        """As :meth:`rota.Scheduler.tick`, one claim and one completion per run.

        A run cut short by an interrupt between them keeps its lease until it
        expires; then it is run again (at-least-once, same idempotency key).
        """
        _validate.finite("now", now)
        outcomes: list[RunOutcome] = []
        while True:
            task = self._claim_from_store(now, 1)
            if task is None:
                return outcomes
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
            error = self._call(task)
            outcomes.append(self._complete(task, error, now, now))
            if error is not None and fatal(error):
                raise error

    def _first(self, when: Schedule, now: Time | None = None) -> tuple[Any, Time]:
        """As the in-memory scheduler binds a schedule, on the store's clock."""
        if now is None:
            now = self._store_time(_validate.time_from("the clock", self._clock()))
        return super()._first(when, now)

    def _store_clock(self) -> Time:
        """The clock of a scheduler whose store keeps time (a database server): the
        store's, so that runners sleep and wake by the time claims are decided by,
        whatever this host's wall clock does."""
        own = self._store.now()
        if own is None:
            raise RuntimeError(f"{self._store!r} stopped keeping time")
        return own

    def _store_time(self, now: Time) -> Time:
        """``now`` on the store's clock: the store's own time if it keeps one."""
        if not self._timed:
            return now
        own = self._store.now()
        return now if own is None else own

    def _claim(
        self, now: Time, *, queued: bool = False, room: int | None = None
    ) -> Held | Run | None:
        """The next run for a runner: from this node's claimed batch, else a new claim
        of up to ``batch`` runs, and no more than ``room`` (what the runner's pool,
        if it has one, can start soon) or, without a pool, than it is expected to
        start within ``poll`` (:meth:`_paced`): the other due runs are left to
        other nodes.

        If the store fails, the error is logged (:meth:`_store_failed`) and nothing is
        claimed; :meth:`next_run_time` then has the runner try again after
        :data:`STORE_RETRY` seconds (the store's own reconnection backoff
        having run out).
        """
        try:
            task = self._claim_next(now, room)
        except Exception as exc:
            self._store_failed(exc)
            return None
        if task is not None and not queued:
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
        return task

    def _store_failed(self, exc: Exception) -> None:
        """A runner's read or claim failed: retry after :data:`STORE_RETRY`, and say
        what is wrong (the error itself: a corrupt file, a read-only file, a full disk
        and an unreachable server are different faults), once per distinct error a
        minute, however the failing and answering calls alternate."""
        self._outage = True
        what = f"{type(exc).__name__}: {exc}".strip()
        seen = self._failure
        at = time.monotonic()
        if seen is None or seen[0] != what or at - seen[1] >= FAILURE_REPEAT:
            self._failure = (what, at)
            logger.error(
                "the store failed (%s); retrying every %gs", what, STORE_RETRY, exc_info=exc
            )

    def _claim_next(self, now: Time, room: int | None) -> Held | Run | None:
        local, now = now, self._store_time(now)
        with self._hold:
            while self._buffer:
                task = self._buffer.popleft()
                lease = task if task.__class__ is Held else self._lease_of(task)
                if lease.lost or lease.cancelled:
                    self._abandon(task, lease)
                    continue
                if now < lease.until:
                    return task
                lease.lost = True  # not renewed in time: someone may have it now
                logger.warning("task %r: lease ran out before its run started", task.task_id)
                self._abandon(task, lease)
        batch = self._commits.lingering()  # a dispatcher's: committed with its claim
        if room is not None and room <= 0:  # the runner's pool is busy: only runs held
            if batch:
                self._commits.commit(batch)
            return None
        limit = self._paced(local) if room is None else min(room, self._batch)
        claimed = self._claim_from_store(now, limit, batch)
        if room is None:  # the claim the next pace is measured from
            self._pace_from = (local, len(self._buffer) + (claimed is not None), limit)
        if self._outage:
            if not self._unwritten:  # else: said once a completion is recorded again
                logger.warning("the store answers again")
            self._outage = False
        return claimed

    def _paced(self, now: Time) -> int:
        """How many runs a runner without a pool claims: as many as it is expected to
        start within :attr:`poll` seconds (those runs wait no longer for it than other
        nodes would take to see them), at most ``batch``.

        The pace is measured from the previous claim, if it was full: the time since
        it, over the runs it held (run meanwhile, one after another). The first
        claim takes one run, then the size follows the pace: runs of 50 µs and a
        0.1 s poll, a full ``batch``; runs of 1 s, one. O(1).
        """
        if self._pace_from is not None:
            at, count, limit = self._pace_from
            self._pace_from = None
            if count >= limit:  # full: more may have been due all along
                spent = now - at
                self._pace = (
                    self._batch
                    if spent <= 0
                    else max(1, min(self._batch, int(self._poll * count / spent)))
                )
        return self._pace

    def _claim_from_store(
        self, now: Time, limit: int, batch: Sequence[Completion] = ()
    ) -> Held | Run | None:
        """Claim up to ``limit`` runs; return the first to start, keep the rest in the batch.

        The completions of ``batch`` are committed in the claim's transaction
        (see :meth:`_commit_and_claim`). Claimed rows that turn out to need no
        run (skipped by a misfire policy, an action this node cannot import)
        are settled, and the claim goes on until a run is found or nothing is due.
        """
        now = self._store_time(now)
        mine = self._flying_head() if self._flying else None
        if mine is not None and mine <= now:  # a concurrent task held here may start a run
            if batch:
                self._commits.commit(batch)
                batch = ()
            run = self._reclaim(now)
            if run is not None:
                return run
        ready: list[Held | Run] = []
        while not ready:
            rows = (
                self._commit_and_claim(batch, now, limit)
                if batch
                else self._store.claim(self._node, now, limit, self._lease, self._actions.known())
            )
            batch = ()
            if not rows:
                return None
            moved: list[Time] = []
            ready = [task for row in rows if (task := self._decide(row, now, moved))]
            if moved:  # runs claimed with these that come after a moved one wait for it
                first = min(moved)
                for task in [t for t in ready if isinstance(t, Held) and t.row.due > first]:
                    ready.remove(task)
                    self._release(task.row)
        with self._hold:
            for task in ready:
                if task.__class__ is Held:
                    self._held[task.task_id] = task  # type: ignore[index]
                    continue
                assert isinstance(task, Run)  # the lease its task's first run here took
                lease, task_id = _parent(task), _tid(task)
                held = self._held.get(task_id)
                if held is None or held.fence != lease.fence:
                    self._held[task_id] = lease
            self._buffer.extend(ready[1:])
        return ready[0]

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
            if claimed is None or (plan.extra and task.row.state != state_of(plan)):
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
            engine: Engine | None = self._engines.pop()
        except IndexError:
            engine = None
        task = restore(row, action, status, again=again, engine=engine)
        if isinstance(action, Bound):
            action.plan = task.plan
        return task

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
        self._replacing(stops)
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
        self._complete(run, error, now, now)

    def _reclaim(self, now: Time) -> Run | None:
        """The next run of a concurrent task whose lease this node holds, if one may
        start at ``now``: claimed by the engine under that lease (one fenced
        transaction per task looked at). A lease found lost is let go.
        O(such tasks)."""
        with self._hold:
            due = [
                (task_id, self._held[task_id])
                for task_id, (_, at) in self._flying.items()
                if at is not None and at <= now and task_id in self._held
            ]
        for task_id, lease in due:
            function = self._actions.function(lease.row.action)
            if lease.lost or lease.cancelled or function is None:
                self._untrack(task_id, lease.fence)
                continue

            def claim(
                row: TaskRow | None, function: Callable[..., object] = function
            ) -> Change[Any]:
                if row is None:
                    return Change(None)
                run, stops, new, requeued = _claimed_run(self._restored(function, row), now)
                return Change((run, stops), row=new, requeued=requeued)

            decided = self._store.modify(task_id, claim, fence=lease.fence)
            if decided is None or decided.row is None:
                lease.lost = True
                self._untrack(task_id, lease.fence)
                continue
            run, stops = decided.value
            self._replacing(stops)
            self._track(task_id, decided.row, lease.fence)
            if run is not None:
                return run  # type: ignore[no-any-return]
        return None

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
        if at is not None and self._wakeups:
            self._wake(at)

    def _untrack(self, task_id: str, fence: int) -> None:
        """This node holds no lease of concurrent task ``task_id`` under ``fence`` any
        more: no heartbeat renews it, no run of it is started here."""
        with self._hold:
            self._flying.pop(task_id, None)
            held = self._held.get(task_id)
            if held is not None and held.fence == fence:
                del self._held[task_id]

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
        if self._listeners:
            self._emit_outcome(outcome)
        return outcome

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

    def _start(self, task: Held | Run) -> bool:  # type: ignore[override]
        """A worker picks up a claimed run: ``False`` if it was cancelled or its lease lost."""
        lease = task if task.__class__ is Held else self._lease_of(task)
        if lease.cancelled or lease.lost:
            with self._hold:
                self._abandon(task, lease)
            return False
        with self._hold:  # status() reads it under the same lock
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
        return True

    def _complete(  # type: ignore[override]
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

    def _complete_later(  # type: ignore[override]
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
        if self._listeners:
            self._emit_outcome(outcome)
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
            fresh = restore(row, _never)
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
                outcome = outcome._replace(result=Result.FAILED if error else Result.OK)
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
                if self._wakeups and decided.requeued and decided.row is not None:
                    self._wake(decided.row.due)
            elif decided.row is not None:
                self._track(_tid(task), decided.row, _parent(task).fence)  # type: ignore[arg-type]
        if decided is None and task.__class__ is not Held:
            self._untrack(_tid(task), _parent(task).fence)  # type: ignore[arg-type]
        if self._listeners:
            self._emit_outcome(outcome)
        return outcome

    # -- runners: heartbeat, wake-ups, release on stop -----------------------

    def _subscribe(self, callback: Callable[[Time], object]) -> Callable[[], None]:
        """A runner starts driving this scheduler: keep its leases, watch the store,
        commit its completions (the heartbeat and committer threads)."""
        unsubscribe = super()._subscribe(callback)
        with self._hold:
            self._users += 1
            if self._keeper is None:
                self._keeper_stop.clear()
                self._keeper = self._thread(self._keep, "rota-heartbeat")
                self._keeper.start()
                if self._group:
                    self._commits.start(self._thread)

        def stop() -> None:
            unsubscribe()
            with self._hold:
                self._users -= 1
                last = self._users == 0
                keeper, committer, buffered = self._keeper, None, list(self._buffer)
                if last:
                    # the committer commits and reports what it has, then ends
                    committer = self._commits.stop()
                    self._keeper, self._buffer = None, deque()
                    for task in buffered:
                        self._held.pop(task.task_id, None)  # type: ignore[call-overload]
            if last:
                self._keeper_stop.set()
                for thread in (committer, keeper):
                    if thread is not None and thread is not threading.current_thread():
                        thread.join()
                for task in buffered:
                    if isinstance(task, Held):
                        self._release(task.row)
                    else:  # a concurrent task's: left to its lease (other runs share it)
                        self._untrack(_tid(task), _parent(task).fence)

        return stop

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread (not started) that runs ``target``, then gives back its
        store connection."""

        def run() -> None:
            try:
                target()
            finally:
                self._thread_done()

        return threading.Thread(target=run, name=name, daemon=True)

    def _thread_done(self) -> None:
        """A thread is done with this scheduler: close the store connections it opened."""
        self._store.release()

    def _keep(self) -> None:
        """The heartbeat thread: renew leases every ``lease / 3``; wake runners on writes."""
        beat_every = self._lease / 3
        last_beat = -float("inf")  # monotonic: a step of the wall clock stops no heartbeat
        last_read: tuple[Time, float] | None = None  # (clock, monotonic) at the last loop
        # Listing the stored actions reads every live row (O(tasks)): on a thread of its
        # own, so that no lease waits for it
        self._thread(self._warn_unknown, "rota-actions").start()
        interval = min(self._poll, beat_every)
        while not self._keeper_stop.is_set():
            began = time.monotonic()
            try:
                # Blocks up to `interval` on a store that hears of changes (PostgreSQL's
                # LISTEN): another node's write wakes this one at once.
                self._store.changes(interval)
                now = _validate.time_from("the clock", self._clock())
                mono = time.monotonic()
                if last_read is not None:
                    self._check_step(now - last_read[0] - (mono - last_read[1]), now)
                last_read = (now, mono)
                if mono - last_beat >= beat_every:
                    self._heartbeat(now)
                    last_beat = mono
                    self._store.beat(self._node, self._store_time(now), self._lease)
                    self._end_stalled()
                # The head, every poll (one indexed read): a write another node made
                # for later is not notified, and nothing else would tell this one
                head = self._wake_time()
                if head is not None:
                    self._wake(head)
            except Exception:
                logger.exception("heartbeat failed; retrying")
            self._keeper_stop.wait(max(0.0, interval - (time.monotonic() - began)))

    def _end_stalled(self) -> None:
        """A node frozen inside a transaction holds its rows until it wakes, whatever
        the server's timeouts: its session is ended once its transaction outlived a
        lease (:meth:`~rota.store.Store.end_stalled`). A failure is logged (once a
        distinct error) and changes nothing else."""
        try:
            self._store.end_stalled(max(self._lease, STALLED))
        except Exception as exc:
            what = f"{type(exc).__name__}: {exc}"
            if what != self._stalled_error:
                self._stalled_error = what
                logger.warning("cannot end the sessions of frozen nodes: %s", what)

    def _check_step(self, jump: float, now: Time) -> None:
        """The scheduler's clock moved ``jump`` seconds more than the monotonic clock
        since the last look: the host's wall clock stepped (NTP correcting a drifted
        VM, a laptop waking). A step back of more than two leases is acted on (a
        shorter one stretches a lease by less than that): the leases written before
        it, by this node or by one that died since, would last ``-jump`` too long,
        so the store gives them back their length
        (:meth:`~rota.store.Store.shift_leases`; a store that keeps its own time
        needs nothing). A manual clock's moves are a test's."""
        if jump >= -2 * self._lease or hasattr(self._clock, "on_change"):
            return
        back = -jump
        logger.warning(
            "the clock stepped back by %.1fs; shortening the leases written before", back
        )
        shift = getattr(self._store, "shift_leases", None)
        if shift is not None and self._store.now() is None:
            shift(now + back / 2, back)

    def _warn_unknown(self) -> None:
        """Say which stored actions this process will leave to others (it cannot run them)."""
        try:
            names = self._store.actions()
        except Exception:
            if self._users:  # (a runner stopped meanwhile may have closed the store)
                logger.exception("could not list the stored actions")
            return
        known = self._actions.known()
        for name in sorted(n for n in names if n not in known):
            if ":" in name:
                logger.warning(
                    "import path %r was not declared by this process and its imports= "
                    "option does not admit it: its tasks are left to a process that runs "
                    "it (never deleted; see docs/security.md)",
                    name,
                )
            else:
                logger.warning(
                    "action %r is not registered here: its tasks are left to a process "
                    "that registers it (never deleted)",
                    name,
                )

    def _heartbeat(self, now: Time) -> None:
        """Extend this node's leases; learn which runs were lost or cancelled meanwhile."""
        with self._hold:
            ids = [task_id for task_id, task in self._held.items() if not task.lost]
        if not ids:
            return
        now = self._store_time(now)
        held = self._store.heartbeat(self._node, now, self._lease, ids)
        with self._hold:
            for task_id, task in self._held.items():
                mine = held.get(task_id)
                if mine is None or mine[0] != task.fence:
                    if not task.lost:
                        logger.warning(
                            "task %r: lease lost (%s)", task_id,
                            "taken over elsewhere" if mine is None
                            else "it ran out, and this node took the run over itself",
                        )  # fmt: skip
                    task.lost = True
                elif mine[1] == Status.CANCELLED:
                    task.cancelled = True
                else:
                    task.until = now + self._lease
            # A concurrent task whose runs this node holds, with no room for another when
            # last written here, is looked at again: another process may have changed it
            # since (resumed, triggered, rescheduled), and only this node may claim it.
            for task_id, (version, at) in list(self._flying.items()):
                if at is None:
                    self._flying[task_id] = (version, now)


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


STALLED = 2.0
"""Seconds a transaction on a server store must have run, at least, before the other
nodes end its session as a frozen node's (the lease, if longer)."""


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


def _claimed_run(task: Held, now: Time) -> tuple[Task | None, list[Run], TaskRow, bool]:
    """A concurrent task's next run claimed by its engine at ``now`` (``None``: none may
    start), the runs ``REPLACE`` stops for it, and the row to store (its lease kept while
    a run is in flight) with whether its run was queued anew. O(runs in flight)."""
    run = task.engine.claim(now, queued=True)
    stops = task.engine.take_stops()
    new, requeued = dump(task, keep_lease=True)
    return run, stops, new, requeued


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


def _never(at: Time) -> None:
    raise RuntimeError("rota: a task restored only to be changed was run")
