"""The read model of a scheduler for the dashboard and the metrics: one :class:`Source`
over :meth:`~rota.Scheduler.listing`/:meth:`~rota.Scheduler.history` and the read half
of its table (:class:`~rota.Tasks`), whichever table it is.

A durable scheduler's table reads the store (so it sees every node's tasks and
outcomes); an in-memory one keeps the latest outcomes of each task from the
scheduler's own events once a reader asks (a memory scheduler keeps only the last
outcome of unfinished tasks). Controls go through the scheduler's own methods: the
rules are decided there, once.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from rota import Scheduler, Upcoming
from rota._scheduling.reads import Entry
from rota.report import status_entry
from rota.store import AuditRow, Ledger, MemoryLedger, NodeRow, OutcomeRow, redacted

log = logging.getLogger("rota.audit")

OPERATIONS = ("pause", "resume", "trigger", "cancel")
"""The controls a dashboard or the HTTP API may apply, as the command's subcommands."""


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


class Source:
    """What a dashboard and the metrics ask of a scheduler. Each call is a read of the
    store (durable) or a snapshot under the scheduler's lock (memory): the scheduler's
    table answers (:class:`~rota.Tasks`, its read half). Creating it begins the
    record of runs where the table keeps one only when asked (memory: the outcomes
    before are not in its history, at most the latest 100 of each task)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.table = scheduler.table
        self.table.record()
        self.name = self.table.where()
        """What the source is, for titles: its store with any password ``***``."""
        self.durable = self.table.leases
        """Whether its tasks are in a store (runs hold leases, nodes beat)."""
        store = getattr(scheduler, "store", None)
        self.ledger: Ledger = store.ledger if store is not None else MemoryLedger()
        """Its store's ledger (settings, the audit log); one of this process in memory."""

    def entries(self, *, after: str | None = None, limit: int | None = None) -> list[Entry]:
        """Every known task with its latest outcome, by id; with ``after``/``limit``,
        the ``limit`` first whose id sorts after ``after``. A store: one listing
        query per 10,000 tasks (or ``limit``)."""
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
        """One task, ``None`` if unknown."""
        return self.table.entry(job_id)

    def history(self, job_id: str, limit: int) -> list[OutcomeRow]:
        """Its latest ``limit`` recorded runs, newest first."""
        return self.table.history(job_id, limit)

    def recent(self, job_ids: list[str], per_job: int) -> dict[str, list[OutcomeRow]]:
        """The latest ``per_job`` recorded runs of each job, newest first."""
        return self.table.recent(job_ids, per_job)

    def upcoming(self, job_id: str, n: int) -> list[Upcoming]:
        """Its next ``n`` slots with what its calendar did (:meth:`Scheduler.upcoming`);
        empty if unknown."""
        task_id = self.table.find(job_id)
        return [] if task_id is None else self.scheduler.upcoming(task_id, n)

    def neighbours(self, job_id: str) -> tuple[list[str], list[str]]:
        """The jobs it waits for (``after=``) and the jobs that wait for it, by id,
        among the unfinished tasks (one read of every task's upstreams)."""
        edges = self.table.edges()
        task_id = self.table.find(job_id)
        ups = [str(up) for up in edges.get(task_id, ())] if task_id is not None else []
        downs = sorted(str(task) for task, found in edges.items() if task_id in found)
        return ups, downs

    def control(self, operation: str, job_id: str) -> bool | None:
        """Apply one of :data:`OPERATIONS`: whether it applied; ``None`` if unknown id."""
        task_id = self.table.find(job_id)
        if task_id is None or self.scheduler.status(task_id) is None:
            return None
        applied: bool = getattr(self.scheduler, operation)(task_id)
        return applied

    def audit(
        self, who: str, action: str, job: str | None, note: str | None, applied: bool
    ) -> None:
        """Store a control action in the audit log (a failure to is logged: the action
        is done)."""
        try:
            self.ledger.audit(AuditRow(time.time(), who, action, job, note, applied))
        except Exception as exc:
            log.error("%s %r by %s not stored in the audit log: %s", action, job, who,
                      redacted(str(exc)))  # fmt: skip

    def audit_log(self, job: str | None, limit: int) -> list[AuditRow]:
        """The latest ``limit`` control actions (on ``job`` only, if given), newest first."""
        return self.ledger.audits(job, limit)

    def leases(self) -> list[Lease]:
        """The runs nodes hold now (none in memory: runs hold no lease)."""
        return leases_of(self.entries()) if self.durable else []

    def nodes(self) -> list[NodeRow]:
        """Every node its heartbeats recorded (none in memory: one process)."""
        return self.table.nodes()

    def pools(self) -> dict[str, tuple[int, int]]:
        """Each pool's size and the places held now, by name (every node's, on a
        store). One read."""
        return self.table.pools()

    def now(self) -> float:
        """The time nodes' heartbeats are on: the store's own, else this host's."""
        return self.table.wall_now()

    def check(self) -> str | None:
        """``None`` while the store answers, else why not (no secret in it)."""
        return self.table.health()


def source(scheduler: Scheduler) -> Source:
    """The read model of ``scheduler`` (a :class:`Source`; see there for what creating
    it begins). Raises ``TypeError`` for anything but a Scheduler."""
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"scheduler must be a rota.Scheduler, got {scheduler!r}")
    return Source(scheduler)


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
