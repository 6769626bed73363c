"""Stats: counts of runs by result and lag percentiles over a recent window."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from rota._core.types import NO_SKIPS, Result, RunOutcome, Skips, Time

WINDOW = 1024
"""Recent runs whose lag the percentiles are taken over: enough for a stable p99,
small enough to sort on every read."""


class StatsSnapshot(NamedTuple):
    """A consistent reading of :class:`Stats` (and, from a runner, its work in flight).

    ``lag_p50``, ``lag_p99`` and ``lag_max`` are over the last ``window`` runs
    (``None`` before the first run); lag is ``started - at``, in clock units.
    ``skipped`` counts the slots that were skipped, and ``skipped_by`` the same
    by reason (``misfire``, ``overlap``, ``deadline``): with ``ok + retry + failed``
    they account for every slot that fell due.
    """

    ok: int
    retry: int
    failed: int
    skipped: int
    running: int
    queued: int
    lag_p50: Time | None
    lag_p99: Time | None
    lag_max: Time | None
    window: int
    skipped_by: Skips = NO_SKIPS

    @property
    def runs(self) -> int:
        """All runs recorded: ``ok + retry + failed``."""
        return self.ok + self.retry + self.failed


def percentile(ordered: list[Time], q: float) -> Time:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of a sorted, non-empty list."""
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


class Stats:
    """Counts runs by result and keeps the lag of the most recent ones.

    Every runner keeps one (``runner.stats()``); with a bare scheduler, feed it
    the outcomes of ``tick``: ``stats.record_all(scheduler.tick(now))``.
    Thread-safe. :meth:`record` is O(1), cheap enough to leave on;
    :meth:`snapshot` sorts the window, O(w log w).

    Raises ``ValueError`` for a ``window`` that is not a positive int.
    """

    __slots__ = ("_counts", "_lags", "_lock", "_skipped", "_skipped_by")

    def __init__(self, window: int = WINDOW) -> None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be an int >= 1, got {window!r}")
        self._counts = dict.fromkeys(Result, 0)
        self._lags: deque[Time] = deque(maxlen=window)
        self._skipped = 0
        self._skipped_by: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, outcome: RunOutcome) -> None:
        """Count one run and remember its lag. O(1)."""
        with self._lock:
            self._counts[outcome.result] += 1
            skipped = outcome.skipped
            if skipped:
                self._skipped += skipped
                by = self._skipped_by
                for reason, count in outcome.skips().items():
                    by[reason] = by.get(reason, 0) + count
            self._lags.append(outcome.started - outcome.at - outcome.jitter)

    def record_all(self, outcomes: Iterable[RunOutcome]) -> None:
        """:meth:`record` each outcome. O(k)."""
        for outcome in outcomes:
            self.record(outcome)

    def snapshot(self, running: int = 0, queued: int = 0) -> StatsSnapshot:
        """Read the counts and lag percentiles; ``running``/``queued`` are passed through."""
        with self._lock:
            counts = dict(self._counts)
            skipped = self._skipped
            skipped_by = Skips(self._skipped_by)
            lags = sorted(self._lags)
            window = self._lags.maxlen or 0
        return StatsSnapshot(
            ok=counts[Result.OK],
            retry=counts[Result.RETRY],
            failed=counts[Result.FAILED],
            skipped=skipped,
            running=running,
            queued=queued,
            lag_p50=percentile(lags, 50) if lags else None,
            lag_p99=percentile(lags, 99) if lags else None,
            lag_max=lags[-1] if lags else None,
            window=window,
            skipped_by=skipped_by,
        )
