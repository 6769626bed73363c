"""The run queue: a binary min-heap of run entries with lazy deletion.

An entry is the tuple ``(at, order, task_id)`` and nothing else, so a stale
entry pins no action or other user object beyond the id. ``order`` is the
entry's sequence number ``seq`` (a counter, unique per entry), shifted by the
task's priority: ``order = priority * 2**64 + seq``, which is just ``seq`` at
the default priority 0. Entries thus sort by (at, priority, seq) with no extra
field and no cost for the default. Being unique, ``order`` also serves as the
entry's version: the engine keeps, on each task, the entry of its one live
run, and an entry is live iff it is that one.
Cancelling or replacing a task therefore just makes its entry stale; stale
entries are dropped when they reach the top, or all at once by compaction.

Invariants (``RunQueue._check`` asserts every one):

1. Heap order on ``(at, order)``: no entry is smaller than its parent.
   ``order`` is unique, so two entries never compare equal and ``task_id``
   (any hashable, perhaps not orderable) is never compared.
2. ``seq`` strictly increases in push order, so entries with the same ``at``
   and priority come out in the order they were pushed, and lower
   priorities first (as in stdlib ``sched``).
3. ``stale`` is exactly the number of entries that are not live, and there is
   at most one live entry per task id.
4. ``stale <= live + STALE_SLACK`` after every operation: garbage is bounded
   by the useful work plus a constant.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping
from heapq import heapify, heappop, heappush
from typing import Generic, Protocol, TypeAlias, TypeVar

from .types import Time

Entry: TypeAlias = tuple[Time, int, Hashable]
"""``(at, order, task_id)``."""

PRIORITY_SHIFT = 2**64
"""``order = priority * PRIORITY_SHIFT + seq``: seq stays below it for any real run count."""


class Owner(Protocol):
    """What the queue's owner table maps a task id to: the holder of its live entry."""

    entry: Entry


OwnerT = TypeVar("OwnerT", bound=Owner)

STALE_SLACK = 256
"""Stale entries tolerated beyond the live count: below this, an O(n) compaction
costs more than the dead entries it would free."""


class RunQueue(Generic[OwnerT]):
    """Min-heap of ``(at, order, task_id)`` with lazy deletion and bounded garbage.

    ``owners`` maps each unfinished task id to its owner (the engine's task),
    whose ``entry`` is the task's one live entry: an entry is live iff
    ``owners.get(entry[2]).entry is entry``. The engine calls :meth:`discard`
    each time it makes one entry stale (removing its owner or pointing the
    owner at another entry). Not thread-safe: the engine serialises calls.
    """

    __slots__ = ("_next_seq", "_owners", "_slack", "_stale", "heap")

    def __init__(self, owners: Mapping[Hashable, OwnerT]) -> None:
        self.heap: list[Entry] = []
        self._owners = owners
        self._next_seq = itertools.count().__next__
        self._stale = 0
        self._slack = STALE_SLACK

    def clear(self) -> None:
        """Drop every entry (the owners are the caller's to clear). O(n)."""
        self.heap.clear()
        self._stale = 0

    def __len__(self) -> int:
        """The number of live entries. O(1)."""
        return len(self.heap) - self._stale

    def push(self, at: Time, task_id: Hashable, priority: int = 0) -> Entry:
        """Add and return a new live entry for ``task_id`` at ``at``. O(log n)."""
        if priority:
            entry = (at, self._next_seq() + priority * PRIORITY_SHIFT, task_id)
        else:
            entry = (at, self._next_seq(), task_id)
        heappush(self.heap, entry)
        return entry

    def discard(self) -> None:
        """Record that one entry went stale; compact if garbage is over the bound.

        O(1), or O(n) for the compaction that at least ``live + STALE_SLACK``
        discards paid for: O(1) amortised.
        """
        self._stale += 1
        if self._stale > len(self.heap) - self._stale + self._slack:
            self._compact()

    def _compact(self) -> None:
        """Keep only the live entries. O(n), paid for by the discards (or pops) that
        put garbage over its bound."""
        self.heap = [entry for entry in self.heap if self._is_live(entry)]
        heapify(self.heap)
        self._stale = 0

    def _is_live(self, entry: Entry) -> bool:
        try:
            owner = self._owners.get(entry[2])
        except Exception:  # the id's __eq__ raised on a hash collision
            owner = self._find(entry)
        return owner is not None and owner.entry is entry

    def _find(self, entry: Entry) -> OwnerT | None:
        """The owner whose live entry is ``entry``, found by identity, never by id.

        For ids whose ``__eq__`` raises when a hash collision makes the table
        compare them: such an id must not stall every other task. O(n), and
        only then.
        """
        for owner in self._owners.values():
            if owner.entry is entry:
                return owner
        return None

    def peek(self) -> Entry | None:
        """The earliest live entry, or ``None``. O(1) amortised (drops stale tops)."""
        heap = self.heap
        owners = self._owners
        while heap:
            entry = heap[0]
            try:
                owner = owners.get(entry[2])
            except Exception:  # the id's __eq__ raised on a hash collision
                owner = self._find(entry)
            if owner is not None and owner.entry is entry:
                return entry
            heappop(heap)
            self._stale -= 1
        return None

    def pop_due(self, now: Time) -> OwnerT | None:
        """Remove the earliest live entry if ``at <= now`` and return its owner.

        ``None`` if nothing is due. O(log n), plus O(log n) for each stale
        entry dropped on the way (paid for by the discard that made it stale).
        """
        heap = self.heap
        owners = self._owners
        while heap:
            entry = heap[0]
            try:
                owner = owners.get(entry[2])
            except Exception:  # the id's __eq__ raised on a hash collision
                owner = self._find(entry)
            if owner is None or owner.entry is not entry:
                heappop(heap)
                self._stale -= 1
            elif entry[0] <= now:
                heappop(heap)
                # One live entry fewer: the garbage bound (invariant 4) is kept here too
                # (only garbage can break it: the common case pays one test)
                stale = self._stale
                if stale and stale > len(heap) - stale + self._slack:
                    self._compact()
                return owner
            else:
                return None
        return None

    def _repair(self, live: list[Entry]) -> None:
        """Put back the ``live`` entries missing from the heap and recount ``stale``. O(n log n).

        For the engine's :meth:`~rota._core.engine.Engine._repair`, after an
        operation was cut short between a heap change and its bookkeeping.
        """
        present = {id(entry) for entry in self.heap}
        for entry in live:
            if id(entry) not in present:
                heappush(self.heap, entry)
        self._stale = sum(1 for entry in self.heap if not self._is_live(entry))

    def _check(self) -> None:
        """Assert every invariant in the module docstring. O(n); for tests."""
        heap = self.heap
        for i in range(1, len(heap)):
            parent = heap[(i - 1) // 2]
            assert parent[:2] < heap[i][:2], f"heap order broken at {i}: {parent} > {heap[i]}"
        assert len({entry[1] for entry in heap}) == len(heap), "order is not unique"
        live = [entry for entry in heap if self._is_live(entry)]
        assert self._stale == len(heap) - len(live), (self._stale, len(heap), len(live))
        ids = [entry[2] for entry in live]
        assert len(set(ids)) == len(ids), "two live entries for one task"
        assert self._stale <= len(live) + self._slack, "garbage over bound"
