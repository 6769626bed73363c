"""The tables a :class:`~rota.Scheduler` keeps its tasks in, and the seam runners drive.

A scheduler answers its public API; where its tasks live is its table's
business. :class:`Tasks` names what a runner (``Runner``, ``AsyncRunner``,
``rota run``) asks of a table: claim a due run, start it, call its action,
complete it, wait for the next one. Two tables implement it:
:class:`LocalTasks`, the deterministic engine under a lock (in memory), and
:class:`rota.durable.StoredTasks`, a store shared by any number of processes.
:class:`Tasks` itself holds what both share: the listeners, the runners'
wake-ups, and the one place an action is called.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from types import FunctionType
from typing import Any, TypeVar

from rota import tracing
from rota._core import validate as _validate
from rota._core.calls import Bound, prepare
from rota._core.checks import (
    check_stoppable,
    slot_windows,
    slots_in,
    stoppable_action,
    updated_call,
)
from rota._core.engine import Engine
from rota._core.events import OUTCOME_KINDS, Event, EventKind, Listener, deliver
from rota._core.moves import Upcoming
from rota._core.policy import Cursor, Plan, Schedule
from rota._core.task import Task, run_at
from rota._core.types import Action, RunOutcome, Status, TaskInfo, Time
from rota.store import NodeRow, OutcomeRow

from .actions import failed, fatal, invoke
from .reads import KEEP, Entry, OutcomeLog

T = TypeVar("T")
_RUN_STARTED, _RUN_SKIPPED = EventKind.RUN_STARTED, EventKind.RUN_SKIPPED  # hot paths' constants


def locked(lock: Any, engine: Engine, operation: Callable[..., T], *args: Any) -> T:
    """Run an engine operation under ``lock`` (an ``RLock``), safe against interrupts.

    The shape (inlined on the hot paths): ``acquire()`` inside ``try``, and
    in ``finally`` a ``release()`` whose ``RuntimeError`` means an interrupt
    cut ``acquire()`` short (an RLock knows its owner, so nothing is
    released that this thread does not hold). ``acquire(); try:`` leaks
    the lock to an interrupt between the two, and ``with lock:`` costs
    ~1,000 more instructions on CPython 3.11. If anything escapes while
    the lock is held, the engine repairs its invariants before release.
    """
    try:
        lock.acquire()
        return operation(*args)
    except BaseException:
        if lock._is_owned():
            engine._repair()
        raise
    finally:
        try:
            lock.release()
        except RuntimeError:  # acquire() was cut short: nothing to release
            pass


class Tasks(ABC):
    """The table behind a :class:`~rota.Scheduler` (its ``table``): what a runner drives.

    A run goes ``claim`` → ``start`` → ``call`` → ``complete`` (or
    ``complete_later``); a runner sleeps until ``wake_time`` or until a
    callback given to ``subscribe`` is called with an earlier head. Every
    method is thread-safe. ``leases`` says whether a claimed run holds a
    lease in a store: then a runner with a pool claims in step with its
    workers, leaving the rest to other nodes.

    A table implements the abstract methods; this base keeps what every table
    shares: the listeners of events, the runners' wake-ups, and the one place a
    run's action is called. ``lock`` guards the listeners and wake-ups (in
    memory, the engine's lock too).
    """

    __slots__ = ("fast", "heard", "listeners", "lock", "plain_code", "wakeups")

    leases = False

    def __init__(self, lock: threading.RLock, *, fast: bool = False) -> None:
        self.lock = lock
        # Instance slots, not class attributes: the scheduler's hot path reads both, and
        # CPython 3.11 specialises a slot's read, not a class attribute's
        self.fast = fast
        """Whether a plain ``schedule_once`` (an ``action(at)``, no options) may take
        the scheduler's hot path straight to :meth:`add` (a table that stores actions
        by name takes the general one)."""
        self.plain_code: object = None
        """Where :attr:`fast`: the code of the last function :meth:`admit` took as a
        plain ``action(at)``, so that scheduling it again costs one identity test."""
        self.wakeups: tuple[Callable[[Time], object], ...] = ()  # runners' wake-ups
        self.listeners: tuple[tuple[Listener, frozenset[EventKind]], ...] = ()  # add_listener
        self.heard: frozenset[EventKind] = frozenset()  # the kinds some listener wants

    def listen(self, listeners: tuple[tuple[Listener, frozenset[EventKind]], ...]) -> None:
        """Keep ``listeners``, and the kinds they want: an event no listener wants is
        not even made (a run's start, for a listener of outcomes). Under the lock."""
        self.heard = frozenset().union(*(kinds for _, kinds in listeners))
        self.listeners = listeners

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to the listeners (outside the lock). O(listeners)."""
        deliver(self.listeners, event)

    def emit_outcome(self, outcome: RunOutcome) -> None:
        """Deliver the events one completed run makes, each only if a listener wants
        its kind: the slots skipped just before it first, then its result."""
        heard, task_id, at = self.heard, outcome.task_id, outcome.at
        if outcome.skipped and _RUN_SKIPPED in heard:
            deliver(self.listeners, Event(_RUN_SKIPPED, task_id, at, outcome))
        kind = OUTCOME_KINDS[outcome.result]
        if kind in heard:
            deliver(self.listeners, Event(kind, task_id, at, outcome))

    def replacing(self, stops: list[Any]) -> None:
        """``Overlap.REPLACE`` decided to stop these runs in flight: say so to the runner
        driving them (``RUN_REPLACED``: ``AsyncRunner`` cancels the coroutine, ``rota
        run`` ends the command). O(len(stops))."""
        for run in stops:
            self.emit(Event(EventKind.RUN_REPLACED, run.task_id, run_at(run)))

    def call(self, task: Task, *, awaitables: bool = False) -> Any:
        """Call a claimed run's action, outside the lock; return what happened.

        The one place a task's action is called. Returns ``None`` on success
        or the exception the action raised, for the driver to complete the
        run with; a driver re-raises a ``BaseException`` that is not an
        ``Exception`` after completing (see :func:`fatal`). An action that
        returns an awaitable is returned as it is when ``awaitables`` is true
        (the asyncio runner awaits it); otherwise the awaitable is closed and
        the run fails with ``TypeError``: a plain driver cannot await it.
        """
        at = task.entry[0]  # a claimed run's entry is its slot (or retry time), unjittered
        try:
            if _RUN_STARTED in self.heard:
                self.emit(Event(_RUN_STARTED, task.entry[2], at))
            if not tracing.ACTIVE:
                return invoke(task, at, awaitables)
            tried = task.plan.attempt if task.plan else 0
            return tracing.traced(lambda: invoke(task, at, awaitables), task.task_id, at,
                                  tried, lambda: self.now() - at)  # fmt: skip
        except BaseException as exc:  # an interrupt around the action (its event, its span)
            return failed(task, at, exc)

    def subscribe(self, callback: Callable[[Time], object]) -> Callable[[], None]:
        """Call ``callback(head)`` when a run is queued while ``head`` is the next time.

        Called outside the lock. Returns a function that unsubscribes.
        """
        with self.lock:
            self.wakeups = (*self.wakeups, callback)

        def unsubscribe() -> None:
            with self.lock:
                self.wakeups = tuple(c for c in self.wakeups if c is not callback)

        return unsubscribe

    def wake(self, head: Time) -> None:
        """Tell every runner that a run is queued at ``head``. O(runners)."""
        for callback in self.wakeups:
            callback(head)

    # -- the API half: what Scheduler's methods ask, once they checked what they can

    @abstractmethod
    def now(self) -> Time:
        """The time a schedule is bound at: the clock's reading (the store's own time
        where the store keeps one). Raises what reading the clock raises."""

    @abstractmethod
    def admit(
        self, task_id: Hashable, action: Any, args: Any, kwargs: Any, plan: Plan | None
    ) -> Any:
        """Check that this table can keep ``task_id`` and run ``action`` called with
        ``args``/``kwargs``; return the action as :meth:`add` takes it. Raises
        ``TypeError`` (``ValueError`` for an ``Overlap.REPLACE`` action that cannot
        be stopped) naming what it refuses; changes nothing."""

    @abstractmethod
    def add(
        self, task_id: Hashable, first: Time, action: Any, plan: Plan | None, replace: bool | None
    ) -> bool:
        """Add a task (its ``action`` as :meth:`admit` gave it, ``plan`` bound to its
        schedule or ``None`` for a one-off with the defaults, first run at ``first``).
        ``replace``: ``False`` leaves an unfinished task of that id alone (returns
        ``False``); ``True`` replaces it; ``None`` declares it (as ``@job`` does: a
        store keeps a task declared the same, and its place in its schedule, across
        restarts; in memory it replaces)."""

    @abstractmethod
    def cancel(self, task_id: Hashable) -> bool:
        """Cancel an unfinished task (``TASK_REMOVED``); see :meth:`Scheduler.cancel`."""

    @abstractmethod
    def pause(self, task_id: Hashable) -> bool:
        """Pause an unfinished task (``TASK_PAUSED``); see :meth:`Scheduler.pause`."""

    @abstractmethod
    def resume(self, task_id: Hashable) -> bool:
        """Resume a paused task (``TASK_RESUMED``); see :meth:`Scheduler.resume`."""

    @abstractmethod
    def reschedule(
        self, task_id: Hashable, when: Schedule, cursor: Cursor | None, first: Time
    ) -> bool:
        """Give an unfinished task the schedule ``when``, bound as ``cursor``/``first``."""

    @abstractmethod
    def trigger(self, task_id: Hashable) -> bool:
        """Queue an extra run of the task now; see :meth:`Scheduler.trigger`."""

    @abstractmethod
    def update(self, task_id: Hashable, found: dict[str, object], options: Any) -> bool:
        """Set the plan attributes ``found`` (:func:`rota._core.checks.changes`) and the
        ``args``/``kwargs`` of ``options``, if there, on an unfinished task."""

    @abstractmethod
    def backfill(self, task_id: Hashable, low: Time, high: Time, idle_only: bool) -> int:
        """Queue the task's slots in ``[low, high)`` that have not run; how many."""

    @abstractmethod
    def status(self, task_id: Hashable) -> Status | None:
        """The task's status, ``None`` for an unknown id."""

    @abstractmethod
    def info(self, task_id: Hashable) -> TaskInfo | None:
        """What :meth:`Scheduler.info` shows of the task, ``None`` for an unknown id."""

    @abstractmethod
    def infos(self, after: str | None, limit: int | None) -> list[TaskInfo]:
        """The unfinished tasks, paged as :meth:`Scheduler.tasks` says."""

    @abstractmethod
    def edges(self) -> dict[Hashable, list[Hashable]]:
        """Every unfinished task's upstream ids (``after=``), for the cycle check: task
        -> the tasks it waits for."""

    @abstractmethod
    def upcoming(self, task_id: Hashable, n: int) -> list[Upcoming]:
        """The task's next ``n`` slots (:meth:`Scheduler.upcoming`): by the engine's one
        rule, :meth:`rota._core.engine.Engine.upcoming`."""

    @abstractmethod
    def next_time(self) -> Time | None:
        """The earliest time a run may be due, ``None`` if nothing is queued."""

    # -- the read half: what the command, the dashboard and the metrics show

    @abstractmethod
    def where(self) -> str:
        """What keeps the tasks, for titles (a store with any password ``***``)."""

    @abstractmethod
    def listing(self, after: str | None, limit: int | None, unfinished: bool) -> list[Entry]:
        """Every known task with its latest recorded run, by id as text, paged as
        :meth:`infos` (only unfinished ones with ``unfinished``)."""

    @abstractmethod
    def entry(self, shown: str) -> Entry | None:
        """The task whose id is shown as ``shown``, ``None`` if unknown."""

    @abstractmethod
    def find(self, shown: str) -> Hashable | None:
        """The id of the task whose id is shown as ``shown``, ``None`` if unknown."""

    @abstractmethod
    def history(self, shown: str, limit: int) -> list[OutcomeRow]:
        """The task's latest ``limit`` recorded runs, newest first."""

    @abstractmethod
    def recent(self, shown: list[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """The latest ``per_task`` recorded runs of each task, newest first."""

    @abstractmethod
    def nodes(self) -> list[NodeRow]:
        """Every node its heartbeats recorded (none in one process)."""

    @abstractmethod
    def pools(self) -> dict[str, tuple[int, int]]:
        """Each pool's size and the places its runs hold now, by name."""

    @abstractmethod
    def wall_now(self) -> float:
        """The time nodes' heartbeats are on, as epoch seconds: the store's own, else
        this host's."""

    @abstractmethod
    def health(self) -> str | None:
        """``None`` while the tasks can be read, else why not (no secret in it)."""

    @abstractmethod
    def record(self) -> None:
        """Begin keeping the record of runs that :meth:`history` reads, if this table
        does not keep it always (a store does; memory keeps it once a reader asks)."""

    # -- the runner half

    @abstractmethod
    def claim(self, now: Time, *, queued: bool = False, room: int | None = None) -> Any:
        """The earliest run due at ``now``, claimed (``queued``: not started yet), or
        ``None``; ``room``: what the runner's pool can take soon (``None``: no bound)."""

    @abstractmethod
    def start(self, task: Any) -> bool:
        """Move a queued run to running; ``False`` if it must not start (cancelled)."""

    @abstractmethod
    def complete(
        self, task: Any, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Complete a claimed run; return its outcome."""

    @abstractmethod
    def complete_later(
        self,
        task: Any,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a claimed run and pass its outcome to ``then``, maybe later."""

    @abstractmethod
    def tick(self, now: Time) -> list[RunOutcome]:
        """Run every run due at ``now`` on this thread; return their outcomes."""

    @abstractmethod
    def wake_time(self) -> Time | None:
        """When a runner must next look for due runs (``None``: nothing queued)."""

    @abstractmethod
    def thread_done(self) -> None:
        """A runner's thread is ending (a store closes the connections it opened)."""


class LocalTasks(Tasks):
    """The in-memory table: the deterministic :class:`~rota._core.engine.Engine` under the
    scheduler's lock. Its hot paths build nothing per run: a claimed run is the
    engine's own task."""

    __slots__ = ("clock", "engine", "epoch", "log", "wall_clock")

    def __init__(
        self,
        engine: Engine,
        lock: threading.RLock,
        clock: Callable[[], Time],
        epoch: bool | None,
        wall_clock: Callable[[], float],
    ) -> None:
        super().__init__(lock, fast=True)
        self.engine = engine
        self.clock = clock
        self.epoch = epoch
        """Whether ``clock`` reads epoch seconds (else its times are shown shifted)."""
        self.wall_clock = wall_clock
        """This host's epoch seconds (``time.time``): for what readers are shown only."""
        self.log: OutcomeLog | None = None
        """The record of runs, kept once a reader asked (:meth:`record`)."""

    def locked(self, operation: Callable[..., T], *args: Any) -> T:
        """Run an engine operation under the lock (see :func:`locked`)."""
        return locked(self.lock, self.engine, operation, *args)

    def wake_time(self) -> Time | None:
        """The earliest live run's time. O(1) amortised."""
        return self.locked(self.engine.next_time)

    # -- the API half

    def now(self) -> Time:
        """The clock's reading, checked (``TypeError``/``ValueError``). O(1)."""
        return _validate.time_from("the clock", self.clock())

    def admit(
        self, task_id: Hashable, action: Any, args: Any, kwargs: Any, plan: Plan | None
    ) -> Action:
        """Any hashable id; any callable, its call shape checked now
        (:func:`rota._core.calls.prepare`, cached: O(1)). ``TypeError`` otherwise."""
        _validate.hashable("task_id", task_id)
        _validate.callable_("action", action)
        if plan is not None and plan.replace:
            check_stoppable(action)
        prepared = prepare(action, args, kwargs)
        if prepared is action and type(action) is FunctionType:
            self.plain_code = action.__code__
        if type(prepared) is Bound:
            prepared.bind(task_id, plan)
        return prepared

    def add(
        self, task_id: Hashable, first: Time, action: Any, plan: Plan | None, replace: bool | None
    ) -> bool:
        """Add the task to the engine (``replace`` ``None``: replacing). O(log n)."""
        lock, engine = self.lock, self.engine  # the shape of locked(), inlined: a hot path
        try:
            lock.acquire()
            if not engine.add(task_id, action, first, plan, replace is not False):
                return False
            head = engine.next_time() if self.wakeups else None
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass
        if head is not None:
            self.wake(head)
        if self.listeners:
            self.emit(Event(EventKind.TASK_ADDED, task_id, first))
        return True

    def _change(
        self, operation: Callable[..., Any], *args: Any, event: EventKind | None = None
    ) -> Any:
        """Run an engine operation under the lock; wake runners if it queued a run;
        emit ``event`` (on ``args[0]``, the task id) if it changed something."""
        engine = self.engine

        def change() -> tuple[Any, Time | None]:
            return operation(*args), engine.next_time() if self.wakeups else None

        changed, head = self.locked(change)
        if head is not None:
            self.wake(head)
        if changed and event is not None and self.listeners:
            self.emit(Event(event, args[0]))
        return changed

    def cancel(self, task_id: Hashable) -> bool:
        """Cancel it in the engine. O(1) amortised."""
        lock, engine = self.lock, self.engine  # the shape of locked(), inlined: a hot path
        try:
            lock.acquire()
            cancelled = engine.cancel(task_id)
        except BaseException:
            if lock._is_owned():  # type: ignore[attr-defined]
                engine._repair()
            raise
        finally:
            try:
                lock.release()
            except RuntimeError:  # acquire() was cut short: nothing to release
                pass
        if cancelled and self.listeners:
            self.emit(Event(EventKind.TASK_REMOVED, task_id))
        return cancelled

    def pause(self, task_id: Hashable) -> bool:
        """Pause it in the engine. O(1) amortised."""
        return bool(self._change(self.engine.pause, task_id, event=EventKind.TASK_PAUSED))

    def resume(self, task_id: Hashable) -> bool:
        """Resume it in the engine. O(log n) plus the missed slots it handles."""
        return bool(self._change(self.engine.resume, task_id, event=EventKind.TASK_RESUMED))

    def reschedule(
        self, task_id: Hashable, when: Schedule, cursor: Cursor | None, first: Time
    ) -> bool:
        """Reschedule it in the engine. O(log n)."""
        return bool(self._change(self.engine.reschedule, task_id, cursor, first, when))

    def trigger(self, task_id: Hashable) -> bool:
        """Queue its extra run at the clock's now. O(log n)."""
        return bool(self._change(self.engine.trigger, task_id, self.now()))

    def update(self, task_id: Hashable, found: dict[str, object], options: Any) -> bool:
        """Change its plan in the engine, rebinding its action to new ``args``/``kwargs``
        (their call shape checked: ``TypeError``). O(log n)."""
        engine = self.engine

        def change() -> bool:
            current = engine.action_of(task_id)
            if current is None:
                return False
            function = stoppable_action(current)
            # (a call with neither, action(at), keeps them empty: None, as given)
            was = getattr(current, "args", None) or None, getattr(current, "kwargs", None) or None
            call = updated_call(function, found, options, *was)
            action = None if call is None else call[2]
            if type(action) is Bound:
                action.bind(task_id, engine.plan_of(task_id))
            return engine.update(task_id, found, action)

        return self.locked(change)

    def backfill(self, task_id: Hashable, low: Time, high: Time, idle_only: bool) -> int:
        """Queue its slots in ``[low, high)`` (:func:`rota._core.checks.slots_in`).
        O(k log n) for k slots."""
        engine = self.engine

        def queue(task_id: Hashable) -> int:
            plan = engine.plan_of(task_id)
            if plan is None:
                return 0
            slots = slots_in(plan, low, high)
            windows = slot_windows(plan, slots)
            return engine.backfill(task_id, slots, idle_only=idle_only, windows=windows)

        queued: int = self._change(queue, task_id)
        return queued

    def status(self, task_id: Hashable) -> Status | None:
        """From the engine (finished tasks: the latest 10,000 at least). O(1)."""
        return self.locked(self.engine.status, task_id)

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """From the engine (:func:`rota._core.engine.task_info`). O(1)."""
        return self.locked(self.engine.info, task_id)

    def infos(self, after: str | None, limit: int | None) -> list[TaskInfo]:
        """A snapshot under the lock: O(n); paged (``after``/``limit`` given), by id as
        text, O(n log n)."""
        infos = self.locked(self.engine.infos)
        if after is None and limit is None:
            return infos
        infos.sort(key=lambda info: str(info.task_id))
        if after is not None:
            infos = [info for info in infos if str(info.task_id) > after]
        return infos if limit is None else infos[:limit]

    def next_time(self) -> Time | None:
        """The earliest live run's time. O(1) amortised."""
        return self.locked(self.engine.next_time)

    def edges(self) -> dict[Hashable, list[Hashable]]:
        """From the engine, under the lock: O(tasks with ``after``)."""
        return self.locked(self.engine.edges)

    def upcoming(self, task_id: Hashable, n: int) -> list[Upcoming]:
        """From the engine, under the lock: O(n) decisions on a copy of its cursor."""
        return self.locked(self.engine.upcoming, task_id, n)

    # -- the read half: a snapshot of the engine, and the record of runs

    def where(self) -> str:
        """``"memory"``."""
        return "memory"

    def record(self) -> None:
        """Begin keeping the latest :data:`~rota._scheduling.reads.KEEP` outcomes of
        each task, from the scheduler's own events (once: later calls change
        nothing). Until then no run pays for it. O(1)."""
        with self.lock:
            if self.log is not None:
                return
            self.log = OutcomeLog(KEEP, self.clock, self.wall)
            kinds = frozenset({EventKind.TASK_ADDED, *OUTCOME_KINDS.values()})
            self.listen((*self.listeners, (self.log.heard, kinds)))

    def wall(self, t: Time) -> Time:
        """A time of the scheduler's clock as epoch seconds: itself on an epoch clock,
        else shifted by the clock's offset from ``time.time()`` (a monotonic clock's
        times are shown, and exported, as wall-clock times). O(1)."""
        return t if self.epoch else t + (self.wall_clock() - self.clock())

    def _log(self) -> OutcomeLog:
        self.record()
        assert self.log is not None
        return self.log

    def listing(self, after: str | None, limit: int | None, unfinished: bool) -> list[Entry]:
        """Every task seen since :meth:`record` and every unfinished one, by id as text,
        each with its latest outcome kept. O(n log n) under the lock."""
        log = self._log()
        live = self.locked(self.engine.infos)
        known = log.seen([info.task_id for info in live])
        by_id = {str(info.task_id): info for info in live}
        entries: list[Entry] = []
        for key in sorted(k for k in known if after is None or k > after):
            if limit is not None and len(entries) >= limit:
                break
            info = by_id.get(key) or (None if unfinished else self.info(known[key]))
            if info is not None:
                entries.append(self._entry(info))
        return entries

    def _entry(self, info: TaskInfo) -> Entry:
        if info.next_run_time is not None and not self.epoch:
            info = info._replace(next_run_time=self.wall(info.next_run_time))
        last = self._log().latest(str(info.task_id), 1)
        return Entry(info, last[0] if last else None, None)

    def find(self, shown: str) -> Hashable | None:
        """O(1) for a task seen before, else O(n)."""
        found = self._log().find(shown)
        if found is not None:
            return found
        for info in self.locked(self.engine.infos):
            if str(info.task_id) == shown:
                return info.task_id
        return None

    def entry(self, shown: str) -> Entry | None:
        """O(1) for a task seen before, else O(n)."""
        task_id = self.find(shown)
        info = None if task_id is None else self.info(task_id)
        return None if info is None else self._entry(info)

    def history(self, shown: str, limit: int) -> list[OutcomeRow]:
        """The outcomes kept since :meth:`record` (at most ``KEEP``). O(limit)."""
        return self._log().latest(shown, limit)

    def recent(self, shown: list[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """O(tasks x per_task)."""
        return {key: self.history(key, per_task) for key in shown}

    def nodes(self) -> list[NodeRow]:
        """None: one process."""
        return []

    def pools(self) -> dict[str, tuple[int, int]]:
        """The engine's pools (:meth:`~rota._core.pools.Pools.pool_use`). O(n)."""
        return self.locked(self.engine.pool_use)

    def wall_now(self) -> float:
        """This host's time."""
        return self.wall_clock()

    def health(self) -> str | None:
        """Memory always answers."""
        return None

    def claim(self, now: Time, *, queued: bool = False, room: int | None = None) -> Task | None:
        """Claim the earliest run due at ``now`` (for runners).

        ``room`` (what the runner's pool can take soon, ``None``: no bound)
        matters only where a claimed run holds something (see
        :attr:`leases`); in memory a waiting claimed run costs nothing.
        """

        def claim() -> tuple[Task | None, list[Any]]:
            task = self.engine.claim(now, queued=queued)
            return task, self.engine.take_stops()

        task, stops = self.locked(claim)
        self.replacing(stops)
        return task

    def start(self, task: Task) -> bool:
        """Move a queued run to running; ``False`` if it was cancelled (for runners)."""
        return self.locked(self.engine.start, task)

    def complete(
        self, task: Task, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Complete a claimed run (for runners), wake them if it queued an earlier run."""

        def complete() -> tuple[RunOutcome, Time | None]:
            outcome = self.engine.complete(task, error, started, finished)
            return outcome, self.engine.next_time() if self.wakeups else None

        outcome, head = self.locked(complete)
        if head is not None:
            self.wake(head)
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def complete_later(
        self,
        task: Task,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a claimed run and pass its outcome to ``then`` (for runners).

        In memory, at once. (A durable scheduler may hold the completion
        back to commit it with others, and call ``then`` after the commit;
        ``linger``: the caller claims again soon, and may commit it then.)
        """
        then(self.complete(task, error, started, finished))

    def thread_done(self) -> None:
        """A runner's thread is ending: nothing to do in memory (a durable scheduler
        closes the store connections that thread opened)."""

    # One frame owns each claimed run from its claim to its completion, so that an
    # interrupt anywhere between the two is seen (design.md, "Interrupts"): hence
    # one long method.
    def tick(self, now: Time) -> list[RunOutcome]:  # noqa: PLR0915
        """What :meth:`rota.Scheduler.tick` documents, in memory: each due run claimed,
        called and completed on this thread, in (time, seq) order; an interrupt
        anywhere between a claim and its completion completes the run, then
        propagates. O(k log n) for k runs, plus the actions. Raises ``TypeError``
        for a non-number ``now``, ``ValueError`` for NaN or infinity.
        """
        if now.__class__ is not float or now - now:  # a finite float: fast; else checked
            _validate.finite("now", now)
        engine = self.engine
        heap = engine.queue.heap
        if not heap or heap[0][0] > now:
            # Nothing due: read without the lock (a heap change is one C call under the
            # GIL, and the earliest entry is never later than a live due run): an idle
            # tick takes no lock and enters no engine frame
            return []
        lock = self.lock
        task: Task | None = None
        try:
            try:  # the shape of locked(), inlined: a hot path
                lock.acquire()
                task = engine.claim(now)
            except BaseException:
                if lock._is_owned():  # type: ignore[attr-defined]
                    engine._repair()
                raise
            finally:
                try:
                    lock.release()
                except RuntimeError:  # acquire() was cut short: nothing to release
                    pass
            if task is None:
                return []
            outcomes: list[RunOutcome] = []
            while True:
                error = self.call(task)
                try:
                    lock.acquire()
                    outcome = engine.complete(task, error, now, now)
                    task = None
                    outcomes.append(outcome)
                    stop = outcome[3]
                    if stop is None or not fatal(stop):
                        stop = None
                        task = engine.claim(now)
                    head = engine.next_time() if self.wakeups else None
                except BaseException:
                    if lock._is_owned():  # type: ignore[attr-defined]
                        engine._repair()
                    raise
                finally:
                    try:
                        lock.release()
                    except RuntimeError:  # acquire() was cut short: nothing to release
                        pass
                if head is not None:
                    self.wake(head)
                if self.listeners:
                    self.emit_outcome(outcome)
                if task is None:
                    if stop is not None:
                        raise stop  # recorded as failed; now it propagates
                    return outcomes
        except BaseException as exc:
            if task is not None and task.status is Status.RUNNING:  # cut short: complete it
                self.complete(task, exc, now, now)
            raise
