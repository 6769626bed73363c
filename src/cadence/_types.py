"""Value types shared by the engine, the scheduler and the runners."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from enum import StrEnum
from typing import Any, NamedTuple, TypeAlias

Time: TypeAlias = int | float
"""A point in time or a duration, in whatever unit the clock uses."""

Action: TypeAlias = Callable[[Any], object]
"""What a task runs: called as ``action(at)``; raising an ``Exception`` fails the run."""


class Status(StrEnum):
    """Where a task is in its life.

    ``scheduled -> (queued ->) running -> done | failed | scheduled`` and
    ``cancelled`` from ``scheduled``, ``queued`` or ``running``. ``done``,
    ``failed`` and ``cancelled`` are final: the task is *finished*.
    """

    # Hash as the str it equals (Enum hashes its *name* in Python code): C-speed
    # lookups in the transition table, and consistent with ``== "scheduled"``.
    __hash__ = str.__hash__

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Result(StrEnum):
    """How one run ended: ``ok``, ``retry`` (failed, a retry is queued) or ``failed``."""

    __hash__ = str.__hash__  # as for Status

    OK = "ok"
    RETRY = "retry"
    FAILED = "failed"


class RunOutcome(NamedTuple):
    """The immutable record of one run of one task.

    ``at`` is the run's scheduled time (its slot, or its retry time);
    ``attempt`` is 0 for a slot's first run and r for its r-th retry;
    ``error`` is the exception the action raised, or ``None``; ``started``
    is the time the action started: the clock's reading under a runner, the
    ``now`` given to :meth:`Scheduler.tick` under ``tick``. ``started - at``
    is the run's lag. ``skipped`` is the number of a recurring task's slots
    that its misfire policy skipped just before this run (always 0 under the
    default, catch-up).
    """

    task_id: Hashable
    at: Time
    result: Result
    error: BaseException | None
    attempt: int
    started: Time
    skipped: int = 0

    @property
    def lag(self) -> Time:
        """``started - at``: how late the run started. O(1)."""
        return self.started - self.at
