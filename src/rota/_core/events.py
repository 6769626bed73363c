"""Events: what listeners added with :meth:`rota.Scheduler.add_listener` hear.

Listeners work with or without a runner (``tick`` emits run events too).
Each is called outside every lock, on the thread where the event happened;
an ``Exception`` it raises is logged (logger ``rota.events``) and changes
nothing, not even for the other listeners. With no listener, emitting costs
one attribute test.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from enum import StrEnum
from typing import NamedTuple

from .types import Result, RunOutcome, Time

logger = logging.getLogger("rota.events")


class EventKind(StrEnum):
    """What happened: one value per event a listener can ask for (a ``StrEnum``: the
    names may be given as strings to :meth:`rota.Scheduler.add_listener`)."""

    __hash__ = str.__hash__  # as Status: C-speed set lookups

    TASK_ADDED = "task_added"
    TASK_REMOVED = "task_removed"  # cancelled
    TASK_PAUSED = "task_paused"
    TASK_RESUMED = "task_resumed"
    RUN_STARTED = "run_started"
    RUN_SUCCEEDED = "run_succeeded"
    RUN_FAILED = "run_failed"
    RUN_RETRIED = "run_retried"
    RUN_SKIPPED = "run_skipped"  # slots skipped just before a run (outcome.skipped of them)
    RUN_REPLACED = "run_replaced"  # Overlap.REPLACE: the run at ``at`` is to be stopped
    SCHEDULER_STARTED = "scheduler_started"  # a runner started
    SCHEDULER_STOPPED = "scheduler_stopped"  # a runner stopped


class Event(NamedTuple):
    """One event: its kind, the task it is about (``None`` for a runner's), the
    run's time (``at``) for run events, and the run's outcome once it has one.

    An immutable record, made only when a listener is registered: O(1)."""

    kind: EventKind
    task_id: Hashable | None = None
    at: Time | None = None
    outcome: RunOutcome | None = None


Listener = Callable[[Event], object]

OUTCOME_KINDS = {
    Result.OK: EventKind.RUN_SUCCEEDED,
    Result.FAILED: EventKind.RUN_FAILED,
    Result.RETRY: EventKind.RUN_RETRIED,
}


def deliver(listeners: tuple[tuple[Listener, frozenset[EventKind]], ...], event: Event) -> None:
    """Call every listener that asked for ``event.kind``; log and isolate their errors."""
    for listener, kinds in listeners:
        if event.kind in kinds:
            try:
                listener(event)
            except Exception:
                logger.exception("listener %r raised on %r; ignored", listener, event)
