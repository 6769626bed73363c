"""Schedules: when a task runs, as "the next time after t".

A :class:`Schedule` is an immutable spec; :meth:`Schedule.start` binds it to
one task as a :class:`Cursor`, whose ``next(now)`` returns the next run time
and advances. Any object with these methods is a schedule: write your own
(business days, sunrise, a list of times) and pass it to
:meth:`rota.Scheduler.schedule`.

Built in:

* :class:`Once`: a single run, after a delay or at an absolute time;
* :class:`FixedRate`: slot k at ``first + k * period`` (no drift);
* :class:`FixedDelay`: each run ``delay`` after the previous run finished;
* :class:`rota.cron.Cron` (extra ``rota[cron]``): cron expressions in an
  IANA time zone.

Times are numbers on the scheduler's clock. Cursors are called under the
scheduler's lock: keep them quick and pure.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rota._core import validate as _validate
from rota._core.policy import Cursor, Schedule, jitter_offset
from rota._core.types import Time


class Once:
    """Run once: ``delay`` after scheduling, or at the absolute time ``at``.

    Raises ``TypeError`` for a non-number, ``ValueError`` for a negative,
    NaN or infinite ``delay`` or a NaN or infinite ``at``, or for both given.
    """

    __slots__ = ("at", "delay", "epoch")

    def __init__(self, delay: Time | timedelta = 0, *, at: Time | datetime | None = None) -> None:
        self.delay = _validate.delay("delay", delay)
        self.at = None if at is None else _validate.finite("at", at)
        self.epoch = isinstance(at, datetime)  # an instant: needs an epoch clock
        if at is not None and delay:
            raise ValueError(f"give delay or at, not both (delay={delay!r}, at={at!r})")

    def __repr__(self) -> str:
        return f"Once(at={self.at!r})" if self.at is not None else f"Once({self.delay!r})"

    def first(self, now: Time) -> Time:
        """The run time for a task scheduled at ``now``."""
        return now + self.delay if self.at is None else self.at

    def start(self, now: Time) -> Cursor:
        """A cursor that yields the run time once, then ``None``."""
        return _OnceCursor(self.first(now))

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data (see :func:`from_spec`). O(1)."""
        return {"kind": "once", "delay": self.delay, "at": self.at}

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (a cursor's ``state()``) describes. O(1)."""
        return _OnceCursor(_validate.optional_time("state", state))


class _OnceCursor:
    __slots__ = ("_at",)

    def __init__(self, at: Time | None) -> None:
        self._at: Time | None = at

    def next(self, now: Time) -> Time | None:
        at, self._at = self._at, None
        return at

    def state(self) -> Time | None:
        """Where this cursor is, as JSON-compatible data: the run still to give, if any."""
        return self._at


class FixedRate:
    """Slots at ``first + k * period``: ``first = start``, or scheduling time + ``delay``.

    Slots are multiplied, never accumulated, so float periods do not drift.
    The next slot is queued when a run completes, so the task never
    overlaps itself; slots it missed are handled by its misfire policy.
    O(1) per slot.

    Raises ``TypeError`` for non-numbers; ``ValueError`` for a ``period``
    that is not > 0 and finite, a negative or non-finite ``delay``, a
    non-finite ``start``, or both ``delay`` and ``start``.
    """

    __slots__ = ("delay", "epoch", "period", "start_at")

    def __init__(
        self,
        period: Time | timedelta,
        *,
        delay: Time | timedelta = 0,
        start: Time | datetime | None = None,
    ) -> None:
        self.period = _validate.positive("period", period)
        self.delay = _validate.delay("delay", delay)
        self.start_at = None if start is None else _validate.finite("start", start)
        self.epoch = isinstance(start, datetime)  # an instant: needs an epoch clock
        if start is not None and delay:
            raise ValueError(f"give delay or start, not both (delay={delay!r}, start={start!r})")

    def __repr__(self) -> str:
        anchor = (
            f"start={self.start_at!r}" if self.start_at is not None else f"delay={self.delay!r}"
        )
        return f"FixedRate({self.period!r}, {anchor})"

    def start(self, now: Time) -> Cursor:
        """A cursor over the slots of a task scheduled at ``now``."""
        first = now + self.delay if self.start_at is None else self.start_at
        return _RateCursor(first, self.period, -1)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data (see :func:`from_spec`). O(1)."""
        return {"kind": "fixed_rate", "period": self.period, "delay": self.delay,
                "start": self.start_at}  # fmt: skip

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (a cursor's ``state()``) describes. O(1)."""
        if not (isinstance(state, list) and len(state) == 2 and isinstance(state[1], int)):
            raise ValueError(f"state must be [first, slot index], got {state!r}")
        return _RateCursor(_validate.finite("state", state[0]), self.period, state[1])


class _RateCursor:
    __slots__ = ("first", "period", "slot")

    def __init__(self, first: Time, period: Time, slot: int) -> None:
        self.first = first
        self.period = period
        self.slot = slot

    def next(self, now: Time) -> Time:
        self.slot += 1
        return self.first + self.slot * self.period

    def skip(self, now: Time, keep: int) -> tuple[int, list[Time]]:
        """Advance past every slot up to ``now``: how many there were, and the last
        ``keep`` of them (see :meth:`rota.schedules.Cursor.skip`). O(keep)."""
        first, period = self.first, self.period
        last = self.slot + max(0, int((now - first) / period) - self.slot)
        while first + (last + 1) * period <= now:  # float division may round either way
            last += 1
        while last > self.slot and first + last * period > now:
            last -= 1
        count = last - self.slot
        tail = [first + k * period for k in range(max(self.slot + 1, last - keep + 1), last + 1)]
        self.slot = last
        return count, tail

    def state(self) -> list[Time]:
        """Where this cursor is, as JSON-compatible data: ``[first, slot index]``."""
        return [self.first, self.slot]


class FixedDelay:
    """Each run ``delay`` after the previous run finished (finish read on the clock).

    The first run is ``initial_delay`` after scheduling. Unlike
    :class:`FixedRate` it drifts by each run's duration, on purpose: the
    pause between runs is what is fixed. It never misses a slot. O(1) per run.

    Raises ``TypeError`` for non-numbers, ``ValueError`` for a ``delay`` that
    is not > 0 and finite or a negative or non-finite ``initial_delay``.
    """

    __slots__ = ("delay", "initial_delay")

    def __init__(self, delay: Time | timedelta, *, initial_delay: Time | timedelta = 0) -> None:
        self.delay = _validate.positive("delay", delay)
        self.initial_delay = _validate.delay("initial_delay", initial_delay)

    def __repr__(self) -> str:
        return f"FixedDelay({self.delay!r}, initial_delay={self.initial_delay!r})"

    def start(self, now: Time) -> Cursor:
        """A cursor for a task scheduled at ``now``."""
        return _DelayCursor(self.delay, now + self.initial_delay)

    def spec(self) -> dict[str, object]:
        """This schedule as JSON-compatible data (see :func:`from_spec`). O(1)."""
        return {"kind": "fixed_delay", "delay": self.delay, "initial_delay": self.initial_delay}

    def resume(self, state: object) -> Cursor:
        """A cursor at the position ``state`` (a cursor's ``state()``) describes. O(1)."""
        return _DelayCursor(self.delay, _validate.optional_time("state", state))


class _DelayCursor:
    __slots__ = ("_delay", "_first")

    def __init__(self, delay: Time, first: Time | None) -> None:
        self._delay = delay
        self._first: Time | None = first

    def next(self, now: Time) -> Time:
        first, self._first = self._first, None
        return now + self._delay if first is None else first

    def state(self) -> Time | None:
        """Where this cursor is, as JSON-compatible data: the first run, until given."""
        return self._first


__all__ = ["Cursor", "FixedDelay", "FixedRate", "Once", "Schedule", "jitter_offset"]
