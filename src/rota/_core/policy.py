"""The protocols the engine is parametrised by, and its per-task plan.

The public homes of the policies are :mod:`rota.schedules`,
:mod:`rota.retry` and :mod:`rota.misfire`; this module holds only what
the engine needs from them, so the engine depends on protocols, not on
concrete policies.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeAlias, runtime_checkable

from .types import Time


def doubling(base: Time, retry: int) -> Time:
    """The contract's retry delay: ``base * 2 ** (retry - 1)`` before retry ``retry``
    (1-based), the rule of a task without a retry policy and of
    :class:`~rota.retry.Backoff`. Past float range it is infinite (a retry that never
    comes: the task fails). O(log retry)."""
    try:
        delay: Time = base * 2 ** (retry - 1)
    except OverflowError:  # a float base past float range: "more than any cap"
        return math.inf
    return delay


@runtime_checkable
class Cursor(Protocol):
    """One task's position in its :class:`Schedule`."""

    def next(self, now: Time) -> Time | None:
        """Return the task's next run time and advance past it; ``None`` when there is none.

        Called once when the task is scheduled (``now`` is the scheduling
        time) and then each time a run completes (``now`` is the completion
        time), and by misfire policies to step over missed slots. Called under
        the scheduler's lock: it must be quick and must not call the scheduler.

        A cursor may also have ``skip(now, keep) -> (count, last)``: advance past
        every run time up to ``now`` at once, returning how many there were and the
        last ``keep`` of them, oldest first. Misfire policies that skip
        (``COALESCE``, ``SKIP``, ``bounded(k)``) use it instead of stepping, so a
        backlog costs what ``skip`` costs, not a step per missed slot
        (``FixedRate``: O(keep); ``Cron``: O(days)).
        """
        ...


@runtime_checkable
class Schedule(Protocol):
    """When a recurring task runs: "the next time after t", as a cursor per task.

    A schedule is an immutable spec that can be shared by many tasks;
    :meth:`start` binds it to one task scheduled at ``now``.
    """

    def start(self, now: Time) -> Cursor:
        """A new cursor for a task scheduled at ``now``."""
        ...


RetryOn: TypeAlias = (
    "type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]"
)
"""Which failures a task retries: exception types, or a predicate on the error."""


@runtime_checkable
class RetryPolicy(Protocol):
    """How long to wait before retrying a failed run."""

    def delay(self, retry: int, previous: Time | None) -> Time | None:
        """The delay before retry number ``retry`` (1-based) of a slot, or ``None``: no retry.

        ``previous`` is the delay before the previous retry of the same slot
        (``None`` for the first retry). The retry runs at the failed run's
        time plus this delay. Called under the scheduler's lock.
        """
        ...


class Plan:
    """Everything about a task beyond the defaults; ``None`` on a plain one-off task.

    Tasks with the contract's defaults carry no plan, so the hot path pays
    nothing for the policies.
    """

    __slots__ = (
        "after",
        "ahead",
        "attempt",
        "backlog",
        "concurrent",
        "cursor",
        "deadline",
        "end",
        "ended",
        "extra",
        "extra_runs",
        "extras",
        "first_at",
        "flying",
        "held",
        "inflight",
        "jitter",
        "last_delay",
        "last_skipped",
        "limit",
        "max_retries",
        "max_runs",
        "misfire",
        "moved",
        "nominal",
        "origin",
        "overlap_skip",
        "paused",
        "pending",
        "pool",
        "priority",
        "replace",
        "rescheduled",
        "retry",
        "retry_on",
        "runs",
        "schedule",
        "skipped",
        "skips",
        "slot",
        "triggered",
        "waiting",
        "window",
        "windows",
    )

    def __init__(
        self,
        cursor: Cursor | None = None,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        misfire: int | None = None,
        priority: int = 0,
    ) -> None:
        self.cursor = cursor  # None: a one-off task
        self.max_retries = max_retries
        self.retry = retry  # None: the scheduler's policy
        self.misfire = misfire  # most missed slots to run; None: all (catch up)
        self.priority = priority
        self.paused = False  # paused while running: park the next run when it completes
        self.backlog: deque[Time] | None = None  # runs decided on, before the cursor's next
        self.attempt = 0  # retries used by the current slot (a task without a plan never retries)
        self.skipped = 0  # slots skipped by the misfire policy, to report on the next run
        self.last_delay: Time | None = None  # the previous retry delay of this slot
        self.rescheduled = False  # rescheduled while running: that run is not retried
        self.slot: Time = -math.inf  # the latest time the cursor gave: the next must be later
        self.first_at: Time = 0  # the time of the current slot's first run, while it retries
        # Where the current run's window begins (it ends at its slot): the slot of the
        # schedule before the earliest it stands for (see docs/policies.md, "The window
        # a run covers"); ahead: the windows of runs in the backlog that do not begin
        # at the run before them (extra runs, and the run they went ahead of), by time.
        self.window: Time | None = None
        self.ahead: dict[Time, Time] | None = None
        self.retry_on: RetryOn | None = None  # None: every Exception is retried
        self.schedule: object = None  # what the task was scheduled with, for info()
        # The scheduling controls (docs/policies.md), a misfire policy and pause; a task
        # that uses none has extra False, and the hot paths look no further than that.
        self.extra = misfire is not None or _calendared(cursor)
        self.overlap_skip = False  # Overlap.SKIP: slots due during a run are skipped
        self.deadline: Time | None = None  # a first attempt later than this is skipped
        self.jitter: Time | None = None  # each slot starts up to this much after it
        self.end: Time | None = None  # no slot after this time
        self.max_runs: int | None = None  # no more slots run than this
        self.runs = 0  # slots of the schedule run so far (for max_runs)
        self.nominal: Time | None = None  # the current run's slot, when its entry is jittered
        self.moved: Time | None = None  # the current run's slot, when its calendar moved it
        self.last_skipped: Any = None  # (slot, reason, detail): TaskInfo.last_skipped
        # Extra runs (backfilled, triggered) go ahead of the schedule's: the current run
        # and the next extra_runs - 1 of the backlog are extra; extras wait for the run
        # in flight to end.
        self.extra_runs = 0
        self.extras: list[Time] | None = None
        self.skips: dict[str, int] | None = None  # skipped slots by reason, for the next run
        self.pending: dict[str, object] | None = None  # changes waiting for the run in flight
        # Runs in flight beside the task (Overlap.allow(n), REPLACE): a concurrent task's
        # runs are their own objects (see Engine._run_of); its entry is its next run.
        self.concurrent = False
        self.limit = 1  # the most runs in flight at once
        self.replace = False  # a run due while one is in flight stops it first
        self.inflight = 0  # runs claimed whose slot is not over (waiting retries too)
        self.flying: list[Any] | None = None  # those runs
        self.held = False  # REPLACE: the next run waits for the stopped one to end
        self.ended: Any = None  # the schedule ended while runs were in flight: their end
        self.windows: deque[tuple[Time, Time]] | None = None  # Overlap.SKIP: runs' spans
        # after=: the upstream conditions its slots wait for (rota._core.deps.Upstream);
        # what its current run waits for (upstream keys); its current run is a trigger's
        self.after: tuple[Any, ...] | None = None
        self.origin: Time | None = None  # its first slot: none of its schedule's before
        self.waiting: tuple[str, ...] | None = None
        self.triggered = False
        self.pool: Any = None  # a rota.Pool: at most its size of its tasks' runs at once

    def uses_controls(self) -> bool:
        """Whether any scheduling control is set, or a misfire policy, or a pause (what
        :attr:`extra` caches). O(1)."""
        return bool(
            self.misfire is not None
            or self.paused
            or self.overlap_skip
            or self.deadline is not None
            or self.jitter
            or self.end is not None
            or self.max_runs is not None
            or self.nominal is not None
            or self.extra_runs
            or self.extras
            or self.pending
            or self.concurrent
            or self.after
            or _calendared(self.cursor)
        )


def _calendared(cursor: object) -> bool:
    """Whether a cursor is a calendar's (:class:`rota._core.moves.CalendarCursor`): its
    runs go through the controls, which take its skips and moved slots. O(1)."""
    return hasattr(cursor, "take_excluded")


def jitter_offset(task_id: Hashable, slot: Time, jitter: Time) -> float:
    """The start offset of a jittered slot, in ``[0, jitter)``: a pure function of the
    slot's idempotency key ``f"{task_id}@{slot!r}"`` (BLAKE2b, not ``hash()``, which
    is salted per process), so every node and every restart computes the same one, and
    offsets over many slots are uniform. O(len(key))."""
    digest = hashlib.blake2b(f"{task_id}@{slot!r}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest) >> 11) / 2**53  # 53 bits: exactly a float in [0, 1)
    return min(unit * jitter, math.nextafter(jitter, 0))  # the product may round up
