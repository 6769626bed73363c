"""The read half of a store's table, and the reads of its API half: a row shown by the
engine's one rule (:func:`rota._core.task.task_info`), with its latest recorded run;
what the command, the dashboard and the metrics read of every node's tasks."""

from __future__ import annotations

import time
from collections.abc import Hashable

from rota._core import codec as _codec
from rota._core.moves import Upcoming
from rota._core.pools import Pool
from rota._core.task import task_info
from rota._core.types import FINISHED, NO_SKIPS, RunOutcome, Status, TaskInfo, Time, result_of
from rota._scheduling.reads import Entry
from rota.store import NodeRow, OutcomeRow, StoreError, TaskRow, redacted

from ._changes import StoredChanges
from ._rows import StoredError, never, removed, restore, slot_of, value_from


class StoredReads(StoredChanges):
    """Reads of the tasks in a store: one query or two each, no state of their own."""

    __slots__ = ()

    def get(self, task_id: Hashable) -> TaskRow | None:
        """The task's stored row, ``None`` for an unknown id (or one not a str). One
        read."""
        return self._store.get(task_id) if isinstance(task_id, str) else None

    def status(self, task_id: Hashable) -> Status | None:
        """Finished tasks stay until pruned. One read."""
        row = self.get(task_id)
        return None if row is None else self.shown(row)[0]

    def info(self, task_id: Hashable) -> TaskInfo | None:
        """``last_outcome`` from the stored history, its ``error`` a
        :class:`StoredError` with the stored text. Two reads."""
        row = self.get(task_id)
        if row is None:
            return None
        last = self._store.outcomes(row.task_id, 1) if row.status not in FINISHED else None
        return self.info_of(row, last[0] if last else None)

    def upcoming(self, task_id: Hashable, n: int) -> list[Upcoming]:
        """Decided by the engine on the task rebuilt from its row, as every operation
        on it is (one read; a row this version cannot read lists nothing)."""
        row = self.get(task_id)
        if row is None or row.status in FINISHED or row.unreadable:
            return []
        task = restore(row, never)
        return task.engine.upcoming(task.task_id, n)

    def infos(self, after: str | None, limit: int | None) -> list[TaskInfo]:
        """The unfinished stored tasks by id, tasks removed by their declarer left out.
        One query, linear in the rows returned (one more for a page that removed tasks
        left short)."""
        page = self.page(after, limit, True)
        pools = self._store.pools() if any("pool" in row.spec for row, _ in page) else {}
        return [self.info_of(row, last, pools) for row, last in page]

    def edges(self) -> dict[Hashable, list[Hashable]]:
        """From every unfinished stored task's spec: one query, linear in the rows."""
        return {
            row.task_id: [upstream[0] for upstream in row.spec["after"]]
            for row in self._store.rows()
            if row.spec.get("after") and row.status not in FINISHED
        }

    def page(
        self, after: str | None, limit: int | None, unfinished: bool
    ) -> list[tuple[TaskRow, OutcomeRow | None]]:
        """Up to ``limit`` stored tasks whose ids come after ``after``, each with its
        latest outcome, leaving out tasks withdrawn by their declarer. O(rows)."""
        found: list[tuple[TaskRow, OutcomeRow | None]] = []
        while True:
            page = self._store.page(after, limit, unfinished=unfinished)
            found += [(row, last) for row, last in page if not removed(row)]
            if limit is None or len(page) < limit or len(found) >= limit:
                return found[:limit]
            after = page[-1][0].task_id

    def next_time(self) -> Time | None:
        """The earliest due row this node can run, or lease of another node's that
        expires (its run may then be taken over). One indexed read."""
        return self._store.next_due(self._node, self._actions.known())

    def shown(
        self, row: TaskRow, pools: dict[str, tuple[int, int]] | None = None
    ) -> tuple[Status, list[str] | None]:
        """The status and ``waiting_for`` shown of a stored task: a due run of a pooled
        task whose pool is full waits for a place (``queued``, the pool named), as the
        engine's parked run does in memory (:func:`rota._core.task.shown_status`).
        ``pools``: :meth:`Store.pools`, read here when needed (one query)."""
        status, waiting = self.status_of(row), row.state.get("waiting")
        found = row.spec.get("pool")
        if isinstance(found, dict) and status is Status.SCHEDULED and not row.paused:
            size, used = (self._store.pools() if pools is None else pools).get(
                found["name"], (0, 0)
            )
            if used >= size and row.due <= self.now():
                return Status.QUEUED, [Pool.from_json(found).waiting]
        return status, waiting

    def info_of(
        self, row: TaskRow, o: OutcomeRow | None, pools: dict[str, tuple[int, int]] | None = None
    ) -> TaskInfo:
        """What ``info`` shows of a stored task, ``o`` its latest outcome: built by the
        one rule the in-memory table uses (:func:`rota._core.engine.task_info`). O(1)
        (a read of the pools for a pooled task's, without ``pools``)."""
        status, waiting = self.shown(row, pools)
        outcome = None
        if o is not None and status not in FINISHED:
            error = None if o.error is None else StoredError(o.error)
            started = o.finished if o.started is None else o.started
            outcome = RunOutcome(
                row.task_id, o.at, result_of(o.result), error, o.attempt, started, o.skipped,
                value_from(o.value), o.skips() if o.skipped_by else NO_SKIPS,
            )  # fmt: skip
        try:
            schedule = (
                None
                if row.unreadable
                else _codec.calendared_from(
                    _codec.schedule_from(row.spec["schedule"]), row.spec.get("calendar")
                )
            )
        except StoreError:  # a kind a newer rota wrote (see the triage of claimed rows)
            schedule = None
        # a concurrent task's next slot, not a retry; a waiting run's own time, not when
        # it is decided again
        due = row.state.get(
            "next", row.state.get("nominal", row.due) if row.state.get("waiting") else row.due
        )
        skipped = row.state.get("last_skipped")
        return task_info(
            row.task_id, status, row.paused, due, schedule, row.state.get("attempt", 0),
            row.due if row.unreadable else slot_of(row), outcome,
            None if skipped is None else tuple(skipped), waiting,
        )  # fmt: skip

    # -- the read half

    def where(self) -> str:
        """The store, as its URL (any password ``***``) or its class."""
        return redacted(str(getattr(self._store, "url", self._store)))

    def record(self) -> None:
        """Nothing to begin: a store records every run."""

    def listing(self, after: str | None, limit: int | None, unfinished: bool) -> list[Entry]:
        """Each row with its latest outcome, why it cannot be read here (if so), its zone
        and lease. One query, linear in the rows returned (one more for a page that
        removed tasks left short; one of the pools for a page with a pooled task)."""
        page = self.page(after, limit, unfinished)
        pools = self._store.pools() if any("pool" in row.spec for row, _ in page) else {}
        return [
            Entry(
                self.info_of(row, last, pools),
                last,
                row.unreadable,
                zone_of(row),
                row.owner,
                row.lease_until,
                row.expiries,
                row.due,
                tags_of(row),
            )
            for row, last in page
        ]

    def entry(self, shown: str) -> Entry | None:
        """Three reads (its row, its info, its last run)."""
        row = self._store.get(shown)
        if row is None:
            return None
        info = self.info(shown)
        if info is None:  # pruned meanwhile
            return None
        last = self._store.outcomes(shown, 1)
        return Entry(
            info, last[0] if last else None, row.unreadable, zone_of(row), tags=tags_of(row)
        )

    def find(self, shown: str) -> Hashable | None:
        """Ids are str: ``shown`` itself if stored. One read."""
        return shown if self._store.get(shown) is not None else None

    def history(self, shown: str, limit: int) -> list[OutcomeRow]:
        """One read."""
        return self._store.outcomes(shown, limit)

    def recent(self, shown: list[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """One read (:meth:`rota.store.Store.recent`)."""
        return self._store.recent(shown, per_task)

    def nodes(self) -> list[NodeRow]:
        """One read."""
        return self._store.nodes()

    def pools(self) -> dict[str, tuple[int, int]]:
        """The store's pools, every node's places counted: one read."""
        return self._store.pools()

    def wall_now(self) -> float:
        """The store's own time where it keeps one."""
        own = self._store.now()
        return time.time() if own is None else float(own)

    def health(self) -> str | None:
        """One small read; any failure of the store is the answer."""
        try:
            self._store.page(limit=1)
        except Exception as exc:
            return redacted(f"{type(exc).__name__}: {exc}")
        return None


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


def tags_of(row: TaskRow) -> tuple[str, ...]:
    """A task's tags as stored with it (``spec["tags"]``), sorted; none for a row
    that has none or cannot be read. O(tags)."""
    tags = row.spec.get("tags") if isinstance(row.spec, dict) else None
    return tuple(tag for tag in tags if isinstance(tag, str)) if isinstance(tags, list) else ()
