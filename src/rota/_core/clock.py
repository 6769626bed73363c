"""ManualClock: a clock that moves only when told to."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from . import validate as _validate
from .types import Time


class ManualClock:
    """A callable clock for tests and simulations.

    ``clock()`` returns the current time; :meth:`advance` and :meth:`set`
    move it. Safe to use from several threads. A runner driving a scheduler
    whose clock is a ``ManualClock`` sleeps until the test moves the clock
    (it subscribes through :meth:`on_change`), so thread and asyncio logic can
    be tested step by step without real sleeps.

    Times may be given as aware ``datetime`` objects (taken as epoch
    seconds) and deltas as ``timedelta`` (seconds).

    Raises ``TypeError`` when ``start`` is not a number (int or float, not bool)
    and ``ValueError`` when it is NaN or infinite.
    """

    __slots__ = ("_lock", "_now", "_wakeups")

    def __init__(self, start: Time | datetime = 0) -> None:
        self._now: Time = _validate.finite("start", start)
        self._lock = threading.Lock()
        self._wakeups: list[Callable[[], object]] = []

    def __call__(self) -> Time:
        """The current time. O(1)."""
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"

    def advance(self, delta: Time | timedelta) -> Time:
        """Move the clock forward by ``delta`` and return the new time. O(listeners).

        Raises ``TypeError`` for a non-number, ``ValueError`` for a negative,
        NaN or infinite ``delta``.
        """
        delta = _validate.delay("delta", delta)
        with self._lock:
            self._now = now = self._now + delta
        self._notify()
        return now

    def set(self, t: Time | datetime) -> None:
        """Jump to time ``t`` (forwards or backwards). O(listeners).

        Raises ``TypeError`` for a non-number, ``ValueError`` for NaN or infinity.
        """
        t = _validate.finite("t", t)
        with self._lock:
            self._now = t
        self._notify()

    def on_change(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` after every :meth:`advance` and :meth:`set`.

        Returns a function that unsubscribes. Callbacks run on the thread that
        moved the clock, outside the clock's lock. O(1).
        """
        _validate.callable_("callback", callback)
        with self._lock:
            self._wakeups.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._wakeups:
                    self._wakeups.remove(callback)

        return unsubscribe

    def _notify(self) -> None:
        with self._lock:
            listeners = tuple(self._wakeups)
        for callback in listeners:
            callback()
