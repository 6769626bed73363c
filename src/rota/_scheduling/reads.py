"""What a scheduler's readers see of its tasks: :class:`Entry` (a task with its latest
recorded run) and, in memory, :class:`OutcomeLog` (the record a store keeps of every
run, kept by the in-memory table once a reader asks for it).

The command's ``status``, the dashboard, the HTTP API and the metrics read every
scheduler through :meth:`rota.Scheduler.listing` and :meth:`rota.Scheduler.history`
(the read half of :class:`~rota.Tasks`): one read model, whichever table answers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import NamedTuple

from rota._core.events import Event
from rota._core.types import TaskInfo, Time, error_text, recorded_result, value_text
from rota.store import OutcomeRow


class Entry(NamedTuple):
    """A task as :meth:`rota.Scheduler.listing` lists it."""

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
    tags: tuple[str, ...] = ()
    """Its labels (``ensure(..., tags=)``, a job file's ``tags``), sorted."""


class OutcomeLog:
    """The latest ``keep`` outcomes of each task of an in-memory scheduler, recorded
    from its events as a store records them (:class:`~rota.store.OutcomeRow`, times
    as epoch seconds), and every id seen, by its id as shown (``str``).

    ``wall`` turns a time of the scheduler's clock into epoch seconds; ``now`` reads
    that clock. Thread-safe: written on the runs' threads, read by any.

    Invariant: every id in ``_outcomes`` is in ``_ids``.
    """

    def __init__(self, keep: int, now: Callable[[], Time], wall: Callable[[Time], Time]) -> None:
        self.keep = keep
        self._now = now
        self._wall = wall
        self._lock = threading.Lock()
        self._ids: dict[str, Hashable] = {}
        self._outcomes: dict[str, deque[OutcomeRow]] = {}

    def check(self) -> None:
        """Assert the invariant above. O(tasks)."""
        with self._lock:
            assert self._outcomes.keys() <= self._ids.keys()

    def heard(self, event: Event) -> None:
        """Note a task added, or record a run's outcome (on the run's path: the clock
        read once, for the run's end). O(1)."""
        key = str(event.task_id)
        outcome = event.outcome
        if outcome is None:
            with self._lock:
                self._ids[key] = event.task_id
            return
        error = outcome.error
        now = self._now()
        shift = self._wall(now) - now
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
            self._outcomes.setdefault(key, deque(maxlen=self.keep)).appendleft(row)

    def seen(self, task_ids: list[Hashable]) -> dict[str, Hashable]:
        """Note ``task_ids`` as seen; every id seen, by its id as shown. O(tasks)."""
        with self._lock:
            for task_id in task_ids:
                self._ids.setdefault(str(task_id), task_id)
            return dict(self._ids)

    def find(self, shown: str) -> Hashable | None:
        """The id shown as ``shown``, if seen. O(1)."""
        with self._lock:
            return self._ids.get(shown)

    def latest(self, shown: str, limit: int) -> list[OutcomeRow]:
        """The latest ``limit`` outcomes of the task shown as ``shown``, newest first.
        O(limit)."""
        with self._lock:
            kept = self._outcomes.get(shown)
            return [] if not kept else list(kept)[:limit]


KEEP = 100
"""Outcomes an in-memory scheduler keeps per task once a reader asked (its history)."""
