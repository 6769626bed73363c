"""A read model of a scheduler for the dashboard and the metrics: the same questions
answered for an in-memory :class:`~rota.Scheduler` and a
:class:`~rota.DurableScheduler` (any store).

:func:`source` picks the adapter. A durable one reads the store (so it sees
every node's tasks and outcomes); an in-memory one keeps the latest outcomes
of each task from the scheduler's own events, since a memory scheduler keeps
only the last outcome of unfinished tasks. Controls go through the
scheduler's own methods: the rules are decided there, once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Any, NamedTuple, Protocol

from rota import DurableScheduler, Event, EventKind, Scheduler, TaskInfo
from rota._core.types import error_text, recorded_result, value_text
from rota.durable import Entry, zone_of
from rota.report import status_entry
from rota.store import NodeRow, OutcomeRow, redacted

OPERATIONS = ("pause", "resume", "trigger", "cancel")
"""The controls a dashboard or the HTTP API may apply, as the command's subcommands."""

KEEP = 100
"""Outcomes an in-memory source keeps per task (its history)."""


class Lease(NamedTuple):
    """A run a node holds now (durable stores): whose, which task, its slot, until when."""

    node: str
    task_id: str
    due: float
    until: float
    takeovers: int
    """How many times this task's lease ran out on a node and was taken over."""
    zone: str | None = None
    """The zone the task's times are shown in (:func:`rota.durable.zone_of`)."""


class Source(Protocol):
    """What a dashboard and the metrics ask of a scheduler. Each call is a read of the
    store (durable) or a snapshot under the scheduler's lock (memory)."""

    name: str
    """What the source is, for titles: its store with any password ``***``."""
    durable: bool

    def entries(self, *, after: str | None = None, limit: int | None = None) -> list[Entry]:
        """Every known task with its latest outcome, by id; with ``after``/``limit``,
        the ``limit`` first whose id sorts after ``after``."""
        ...

    def entry(self, job_id: str) -> Entry | None:
        """One task, ``None`` if unknown."""
        ...

    def history(self, job_id: str, limit: int) -> list[OutcomeRow]:
        """Its latest ``limit`` recorded runs, newest first."""
        ...

    def recent(self, job_ids: list[str], per_job: int) -> dict[str, list[OutcomeRow]]:
        """The latest ``per_job`` recorded runs of each job, newest first."""
        ...

    def control(self, operation: str, job_id: str) -> bool | None:
        """Apply one of :data:`OPERATIONS`: whether it applied; ``None`` if unknown id."""
        ...

    def leases(self) -> list[Lease]:
        """The runs nodes hold now (empty in memory: runs hold no lease)."""
        ...

    def nodes(self) -> list[NodeRow]:
        """Every node its heartbeats recorded (empty in memory: one process)."""
        ...

    def now(self) -> float:
        """The time nodes' heartbeats are on: the store's own, else this host's."""
        ...

    def check(self) -> str | None:
        """``None`` while the store answers, else why not (no secret in it)."""
        ...


def source(scheduler: Scheduler) -> Source:
    """The read model of ``scheduler``: a :class:`StoreSource` for a
    :class:`~rota.DurableScheduler`, else a :class:`MemorySource` (which starts
    listening now: outcomes before this call are not in its history). Raises
    ``TypeError`` for anything but a Scheduler."""
    if isinstance(scheduler, DurableScheduler):
        return StoreSource(scheduler)
    if isinstance(scheduler, Scheduler):
        return MemorySource(scheduler)
    raise TypeError(f"scheduler must be a rota.Scheduler, got {scheduler!r}")


def leases_of(entries: list[Entry]) -> list[Lease]:
    """The runs held now among ``entries``, by node then task. O(n log n)."""
    return sorted(
        Lease(e.owner, str(e.info.task_id), e.due, e.lease_until, e.takeovers, e.zone)
        for e in entries
        if e.owner is not None and e.lease_until is not None and e.due is not None
    )


def status_json(entry: Entry) -> dict[str, Any]:
    """:func:`rota.report.status_entry` with an id JSON can carry (a memory task id
    that is not a str, int or float is shown as its ``str``)."""
    shown = status_entry(entry)
    if not isinstance(shown["id"], str | int | float):
        shown["id"] = str(shown["id"])
    return shown


class StoreSource:
    """A :class:`DurableScheduler`'s store, as every node shares it."""

    durable = True

    def __init__(self, scheduler: DurableScheduler) -> None:
        self.scheduler = scheduler
        store = scheduler.store
        self.name = redacted(str(getattr(store, "url", store)))

    def entries(self, *, after: str | None = None, limit: int | None = None) -> list[Entry]:
        """See :meth:`Source.entries`: one listing query per 10,000 tasks (or ``limit``)."""
        if limit is not None:
            return self.scheduler.listing(after=after, limit=limit)
        found: list[Entry] = []
        while True:
            page = self.scheduler.listing(after=after, limit=10_000)
            found += page
            if len(page) < 10_000:
                return found
            after = str(page[-1].info.task_id)

    def entry(self, job_id: str) -> Entry | None:
        """See :meth:`Source.entry`: three reads (its row, its info, its last run)."""
        row = self.scheduler.store.get(job_id)
        if row is None:
            return None
        info = self.scheduler.info(job_id)
        if info is None:  # pruned meanwhile
            return None
        last = self.scheduler.history(job_id, 1)
        return Entry(info, last[0] if last else None, row.unreadable, zone_of(row))

    def history(self, job_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`Source.history`: one read."""
        return self.scheduler.history(job_id, limit)

    def recent(self, job_ids: list[str], per_job: int) -> dict[str, list[OutcomeRow]]:
        """See :meth:`Source.recent`: :meth:`rota.store.Store.recent`."""
        return self.scheduler.store.recent(job_ids, per_job)

    def control(self, operation: str, job_id: str) -> bool | None:
        """See :meth:`Source.control`: one transaction."""
        if self.scheduler.status(job_id) is None:
            return None
        applied: bool = getattr(self.scheduler, operation)(job_id)
        return applied

    def leases(self) -> list[Lease]:
        """See :meth:`Source.leases`: one listing of the tasks."""
        return leases_of(self.entries())

    def nodes(self) -> list[NodeRow]:
        """See :meth:`Source.nodes`: one read."""
        return self.scheduler.store.nodes()

    def now(self) -> float:
        """See :meth:`Source.now`."""
        own = self.scheduler.store.now()
        return time.time() if own is None else float(own)

    def check(self) -> str | None:
        """See :meth:`Source.check`: one small read."""
        try:
            self.scheduler.store.page(limit=1)
        except Exception as exc:  # any failure of the store is the answer
            return redacted(f"{type(exc).__name__}: {exc}")
        return None


class MemorySource:
    """An in-memory :class:`Scheduler`: its tasks, and the outcomes it reported since."""

    durable = False

    def __init__(self, scheduler: Scheduler, keep: int = KEEP) -> None:
        self.scheduler = scheduler
        self.name = "memory"
        self._lock = threading.Lock()
        self._ids: dict[str, Hashable] = {}  # every task seen, by its id as shown
        self._outcomes: dict[str, deque[OutcomeRow]] = {}
        self._keep = keep
        self.close = scheduler.add_listener(
            self._on_event,
            EventKind.TASK_ADDED, EventKind.RUN_SUCCEEDED, EventKind.RUN_FAILED,
            EventKind.RUN_RETRIED,
        )  # fmt: skip

    def _on_event(self, event: Event) -> None:
        key = str(event.task_id)
        outcome = event.outcome
        if outcome is None:
            with self._lock:
                self._ids[key] = event.task_id
            return
        # On the run's path: the clock read once, for the run's end and the wall shift
        now = self.scheduler.clock()
        shift = self._shift(now)
        error = outcome.error
        at = outcome.at + shift
        row = OutcomeRow(
            key, at, outcome.attempt, 0, at, recorded_result(outcome.result, error),
            None if error is None else error_text(error),
            outcome.started + shift, now + shift, outcome.skipped, None,
            None if outcome.value is None else value_text(outcome.value),
            None if not outcome.skipped else OutcomeRow.skips_text(outcome.skipped_by),
        )  # fmt: skip
        with self._lock:
            self._ids[key] = event.task_id
            self._outcomes.setdefault(key, deque(maxlen=self._keep)).appendleft(row)

    def _shift(self, now: float) -> float:
        """What turns a time of the scheduler's clock (reading ``now``) into epoch
        seconds: nothing on an epoch clock, else the clock's offset from
        ``time.time()`` (a monotonic clock's times are shown, and exported, as
        wall-clock times)."""
        return 0.0 if self.scheduler.epoch else time.time() - now

    def _wall(self, t: float) -> float:
        """A time of the scheduler's clock as epoch seconds (see :meth:`_shift`)."""
        return t + self._shift(self.scheduler.clock())

    def _infos(self) -> list[TaskInfo]:
        live = {str(info.task_id): info for info in self.scheduler.tasks()}
        with self._lock:
            for info in live.values():
                self._ids.setdefault(str(info.task_id), info.task_id)
            known = dict(self._ids)
        infos = [live.get(key) or self.scheduler.info(task_id) for key, task_id in known.items()]
        return sorted((i for i in infos if i is not None), key=lambda i: str(i.task_id))

    def _entry(self, info: TaskInfo) -> Entry:
        if info.next_run_time is not None and not self.scheduler.epoch:
            info = info._replace(next_run_time=self._wall(info.next_run_time))
        with self._lock:
            kept = self._outcomes.get(str(info.task_id))
            last = kept[0] if kept else None
        return Entry(info, last, None, None)

    def entries(self, *, after: str | None = None, limit: int | None = None) -> list[Entry]:
        """See :meth:`Source.entries`: O(n log n) under the scheduler's lock."""
        infos = [i for i in self._infos() if after is None or str(i.task_id) > after]
        return [self._entry(info) for info in infos[:limit]]

    def entry(self, job_id: str) -> Entry | None:
        """See :meth:`Source.entry`: O(1) for a task seen before, else O(n)."""
        task_id = self._find(job_id)
        info = None if task_id is None else self.scheduler.info(task_id)
        return None if info is None else self._entry(info)

    def _find(self, job_id: str) -> Hashable | None:
        with self._lock:
            if job_id in self._ids:
                return self._ids[job_id]
        for info in self.scheduler.tasks():
            if str(info.task_id) == job_id:
                return info.task_id
        return None

    def history(self, job_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`Source.history`: at most :data:`KEEP`, O(limit)."""
        with self._lock:
            return list(self._outcomes.get(job_id, ()))[:limit]

    def recent(self, job_ids: list[str], per_job: int) -> dict[str, list[OutcomeRow]]:
        """See :meth:`Source.recent`: O(jobs x per_job)."""
        return {job_id: self.history(job_id, per_job) for job_id in job_ids}

    def control(self, operation: str, job_id: str) -> bool | None:
        """See :meth:`Source.control`: O(log n)."""
        task_id = self._find(job_id)
        if task_id is None or self.scheduler.status(task_id) is None:
            return None
        applied: bool = getattr(self.scheduler, operation)(task_id)
        return applied

    def leases(self) -> list[Lease]:
        """See :meth:`Source.leases`: none in memory."""
        return []

    def nodes(self) -> list[NodeRow]:
        """See :meth:`Source.nodes`: none in memory."""
        return []

    def now(self) -> float:
        """See :meth:`Source.now`: this host's."""
        return time.time()

    def check(self) -> str | None:
        """See :meth:`Source.check`: memory always answers."""
        return None
