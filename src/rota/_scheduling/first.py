"""Binding a schedule to a new task: its cursor and first run time, checked against the
scheduler's clock (epoch or monotonic)."""

from __future__ import annotations

from rota._core.policy import Cursor
from rota._core.types import Time
from rota._core.validate import time_from
from rota.schedules import Once

EPOCH_SUSPECT = 10 * 365 * 86_400
"""On a monotonic clock, an absolute time this far ahead is taken for an epoch time
given by mistake (``Once(at=time.time() + 60)``): refused with a clear error."""


def first_run(when: object, now: Time, epoch: bool | None) -> tuple[Cursor | None, Time]:
    """Bind ``when`` to a new task scheduled at ``now`` on a clock that is an epoch one
    (``epoch``: ``None`` when not known): its cursor (``None`` for a one-off) and first
    run.

    Raises ``TypeError`` for a ``when`` that is not a schedule or a first time that is
    not a number, ``ValueError`` for no first time, one that is not finite, or a
    schedule that needs an epoch clock on a monotonic one; what the schedule itself
    raises propagates. O(1) plus the schedule's ``start`` and first ``next``.
    """
    if epoch is False and getattr(when, "epoch", False):
        raise ValueError(
            f"{when!r} runs at wall-clock instants, but this scheduler's clock is "
            "monotonic: use Scheduler(clock=time.time)"
        )
    if isinstance(when, Once):
        cursor, first = None, time_from(f"{when!r}", when.first(now))
    else:
        cursor = _cursor(when, now)
        nxt = cursor.next(now)
        if nxt is None:
            raise ValueError(f"when has no run time: {when!r}")
        first = time_from(f"{when!r}: the first run time", nxt)
    absolute = (  # Once(at=...) or FixedRate(start=...): a number naming an instant
        getattr(when, "at", None) is not None or getattr(when, "start_at", None) is not None
    )
    if epoch is False and absolute and first - now > EPOCH_SUSPECT:
        raise ValueError(
            f"{when!r} first runs at {first!r}, more than ten years after now ({now!r}) on "
            "this monotonic clock: an epoch time? Use Scheduler(clock=time.time) for "
            "wall-clock times"
        )
    return cursor, first


def _cursor(when: object, now: Time) -> Cursor:
    """Start a schedule's cursor, checking that ``when`` is a schedule."""
    start = getattr(when, "start", None)
    if not callable(start):
        raise TypeError(f"when must be a schedule (with a start(now) method), got {when!r}")
    cursor = start(now)
    if not callable(getattr(cursor, "next", None)):
        raise TypeError(f"{when!r}.start() must return a cursor with next(now), got {cursor!r}")
    return cursor  # type: ignore[no-any-return]
