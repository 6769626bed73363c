"""MemoryStore: the store protocol in memory, with the same conditional semantics."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rota._core.types import FINISHED, LEASED, Time

from ._base import (
    RUNNING,
    SCHEDULED,
    Change,
    Edit,
    Known,
    Listed,
    NodeRow,
    OutcomeRow,
    StoreBase,
    TaskRow,
    run_order,
)
from ._ledger import MemoryLedger
from ._pools import POOL, memory_pools, pool_name
from ._waits import ended_rows, waiting_for, wakes
from ._write import tags_of


class MemoryStore(StoreBase):
    """A :class:`~rota.store.Store` that keeps everything in this process.

    Nothing survives the process: it backs deterministic simulations of
    several nodes sharing one store, and ``memory:`` store URLs. Rows are
    copied in and out, so a caller never shares state with the store, as
    with a database. ``clock`` gives the store a time of its own, as a
    database server has (see :meth:`now`); by default it takes its
    callers'. Thread-safe (one lock). Costs: :meth:`modify` and
    :meth:`get` O(1) plus the copy; :meth:`claim` and :meth:`next_due` O(n).
    """

    url = "memory:"
    """The store as ``--store`` names it."""

    def __init__(self, clock: Callable[[], Time] | None = None) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[str, TaskRow] = {}
        self._outcomes: dict[tuple[str, Time, int, int], OutcomeRow] = {}
        self._nodes: dict[str, NodeRow] = {}
        self._waits: dict[str, set[str]] = {}  # upstream -> the tasks whose runs wait for it
        self._pools: dict[str, int] = {}  # each pool's size, as last written
        self._seq = 0
        self._version = 0
        self.ledger = MemoryLedger(self._lock, lambda: self._outcomes)
        """See :attr:`rota.store.Store.ledger`."""

    def __repr__(self) -> str:
        return f"<MemoryStore tasks={len(self._rows)}>"

    def open(self) -> None:
        """Nothing to create."""

    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """See :meth:`rota.store.Store.modify_many` (all or nothing, as a transaction)."""
        with self._lock:
            return self._modify(edits)

    def _modify(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """:meth:`modify_many`'s work, under the lock: all or nothing."""
        rows, outcomes, seq = dict(self._rows), dict(self._outcomes), self._seq
        results: list[Change[Any] | None] = []
        for task_id, change, fence, expect in edits:
            row = rows.get(task_id)
            if fence is not None and (row is None or row.fence != fence):
                results.append(None)
                continue
            if expect is not None and row is not None and row.version == expect[0]:
                decided = expect[1]
            else:
                decided = change(None if row is None else row.copy())
            if decided.outcome is not None:
                outcome = decided.outcome
                key = (outcome.task_id, outcome.slot, outcome.attempt, outcome.fence)
                if key in outcomes:
                    raise RuntimeError(f"outcome {key} recorded twice")
                outcomes[key] = outcome
            if decided.row is not None:
                new = decided.row.copy()
                new.version = 0 if row is None else row.version + 1
                if decided.requeued or row is None:
                    seq += 1
                    new.seq = seq
                rows[task_id] = new
                found = new.spec.get(POOL)
                if isinstance(found, dict):
                    self._pools[found["name"]] = found["size"]
            results.append(decided)
        self._wake(rows, *wakes(results))
        self._rows, self._outcomes, self._seq = rows, outcomes, seq
        self._version += 1
        return results

    def _wake(self, rows: dict[str, TaskRow], written: list[TaskRow], woken: list[str]) -> None:
        """Keep the index of waiting runs for the rows just ``written``; make those
        waiting for a ``woken`` upstream due at once (as a database store's
        :func:`~rota.store._waits.sync_waits`). O(rows written + runs woken)."""
        for row in written:
            for upstream in waiting_for(row):
                self._waits.setdefault(upstream, set()).add(row.task_id)
        for upstream in woken:
            for task_id in self._waits.pop(upstream, ()):
                found = rows.get(task_id)
                if found is None or upstream not in waiting_for(found):
                    continue  # (no longer waits for it: the index is cleaned here)
                own = found.state.get("nominal", found.due)  # its run's own time
                if found.owner is None and found.due is not None and found.due > own:
                    new = found.copy()
                    new.due, new.version = own, found.version + 1
                    rows[task_id] = new

    def claim(self, node: str, now: Time, limit: int, lease: Time, known: Known) -> list[TaskRow]:
        """See :meth:`rota.store.Store.claim`."""
        with self._lock:
            return self._claim(node, now, limit, lease, known)

    def complete_and_claim(
        self, edits: Sequence[Edit], node: str, now: Time, limit: int, lease: Time, known: Known
    ) -> tuple[list[Change[Any] | None], list[TaskRow]]:
        """See :meth:`rota.store.Store.complete_and_claim` (under the lock once; a
        claim that raises undoes the edits)."""
        with self._lock:
            before = self._rows, self._outcomes, self._seq, self._version
            results = self._modify(edits)  # new dicts and rows: ``before`` stays as it was
            try:
                return results, self._claim(node, now, limit, lease, known)
            except BaseException:
                self._rows, self._outcomes, self._seq, self._version = before
                raise

    def _claim(self, node: str, now: Time, limit: int, lease: Time, known: Known) -> list[TaskRow]:
        """:meth:`claim`'s work, under the lock."""
        due = self._open(now, known)[:limit]
        expired = sorted(
            (r for r in self._rows.values() if _expired(r, now) and known.claims(r)),
            key=lambda r: r.lease_until or 0,
        )[: limit - len(due)]
        claimed = []
        for row in due + expired:
            row.reclaimed = row.status != SCHEDULED
            if row.reclaimed:
                row.expiries += 1
            row.status = RUNNING
            row.owner = node
            row.lease_until = now + lease
            row.fence += 1
            claimed.append(row.copy())
            row.reclaimed = False
        if claimed:
            self._version += 1
        return claimed

    def heartbeat(
        self, node: str, now: Time, lease: Time, held: Collection[str]
    ) -> dict[str, tuple[int, str]]:
        """See :meth:`rota.store.Store.heartbeat`."""
        with self._lock:
            owned = {}
            for task_id in held:
                row = self._rows.get(task_id)
                if row is not None and row.owner == node:
                    if row.status in LEASED:
                        row.lease_until = now + lease
                    owned[task_id] = (row.fence, row.status)
            return owned

    def shift_leases(self, beyond: Time, by: Time) -> int:
        """See :meth:`rota.store.Store.shift_leases`. O(n)."""
        with self._lock:
            moved = [
                r for r in self._rows.values()
                if r.status in LEASED and r.lease_until is not None and r.lease_until > beyond
            ]  # fmt: skip
            for r in moved:
                assert r.lease_until is not None
                r.lease_until -= by
                r.version += 1
            return len(moved)

    def next_due(self, node: str, known: Known, *, own: bool = False) -> Time | None:
        """See :meth:`rota.store.Store.next_due`."""
        with self._lock:
            times = [r.due for r in self._open(None, known)[:1]]
            times += [
                r.lease_until
                for r in self._rows.values()
                if r.status in LEASED and (own or r.owner != node) and r.lease_until is not None
                and known.claims(r)
            ]  # fmt: skip
            return min(times, default=None)

    def _open(self, now: Time | None, known: Known) -> list[TaskRow]:
        """The rows due at ``now`` (``None``: at any time) that a claim would take, in
        run order: those of a full pool left out, a pool's places taken in that order
        (``rota.store._pools``, as one claim statement and its check). O(n log n)."""
        room = {name: size - used for name, (size, used) in self._pools_now().items()}
        found = []
        for row in sorted(
            (r for r in self._rows.values() if _due(r, now) and known.claims(r)), key=run_order
        ):
            name = pool_name(row)
            if name is not None:
                if room.get(name, 0) <= 0:
                    continue
                room[name] -= 1
            found.append(row)
        return found

    def _pools_now(self) -> dict[str, tuple[int, int]]:
        return memory_pools(self._rows.values(), self._pools)

    def tagged(self, tag: str) -> list[str]:
        """See :meth:`rota.store.Store.tagged`. O(n)."""
        with self._lock:
            return sorted(
                r.task_id for r in self._rows.values()
                if r.status not in FINISHED and tag in tags_of(r.spec)
            )  # fmt: skip

    def pools(self) -> dict[str, tuple[int, int]]:
        """See :meth:`rota.store.Store.pools`. O(n)."""
        with self._lock:
            return self._pools_now()

    def get(self, task_id: str) -> TaskRow | None:
        """See :meth:`rota.store.Store.get`."""
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else row.copy()

    def actions(self) -> set[str]:
        """See :meth:`rota.store.Store.actions`."""
        with self._lock:
            return {
                r.action for r in self._rows.values()
                if (r.status == SCHEDULED and not r.paused) or r.status in LEASED
            }  # fmt: skip

    def rows(self) -> list[TaskRow]:
        """See :meth:`rota.store.Store.rows`."""
        with self._lock:
            return [self._rows[key].copy() for key in sorted(self._rows)]

    def page(
        self, after: str | None = None, limit: int | None = None, *, unfinished: bool = False
    ) -> list[Listed]:
        """See :meth:`rota.store.Store.page`: O(n log n) here (a test store)."""
        with self._lock:
            keys = sorted(
                k for k, r in self._rows.items()
                if (after is None or k > after) and not (unfinished and r.status in FINISHED)
            )[:limit]  # fmt: skip
            latest: dict[str, OutcomeRow] = {}
            for o in self._outcomes.values():
                best = latest.get(o.task_id)
                if best is None or (o.slot, o.attempt, o.fence) > (
                    best.slot,
                    best.attempt,
                    best.fence,
                ):
                    latest[o.task_id] = o
            return [Listed(self._rows[k].copy(), latest.get(k)) for k in keys]

    def outcomes(self, task_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`rota.store.Store.outcomes`."""
        with self._lock:
            mine = [o for o in self._outcomes.values() if o.task_id == task_id]
        return list(reversed(mine))[:limit]

    def recorded(self, task_id: str, start: Time, end: Time) -> set[Time]:
        """See :meth:`rota.store.Store.recorded`. O(outcomes)."""
        with self._lock:
            return {
                o.slot for o in self._outcomes.values()
                if o.task_id == task_id and start <= o.slot < end
            }  # fmt: skip

    def ended(self, task_id: str, start: Time, end: Time) -> tuple[dict[Time, str], Time | None]:
        """See :meth:`rota.store.Store.ended`. O(outcomes)."""
        with self._lock:
            found = [(o.slot, o.result, o.started) for o in self._outcomes.values()
                     if o.task_id == task_id and o.result != "retry"]  # fmt: skip
        return ended_rows(found, start, end)

    def beat(self, node: str, now: Time, lease: Time) -> None:
        """See :meth:`rota.store.Store.beat`."""
        with self._lock:
            found = self._nodes.get(node)
            self._nodes[node] = NodeRow(node, now if found is None else found.started, now, lease)

    def nodes(self) -> list[NodeRow]:
        """See :meth:`rota.store.Store.nodes`."""
        with self._lock:
            return [self._nodes[node] for node in sorted(self._nodes)]

    def prune(self, before: Time, limit: int) -> int:
        """See :meth:`rota.store.Store.prune`. O(n)."""
        with self._lock:
            self._nodes = {n: row for n, row in self._nodes.items() if row.seen >= before}
            old = [k for k, o in self._outcomes.items() if o.finished < before][:limit]
            for key in old:
                del self._outcomes[key]
            kept = {o.task_id for o in self._outcomes.values()}
            gone = [
                task_id for task_id, row in self._rows.items()
                if row.status in FINISHED and row.due < before and task_id not in kept
            ][:limit]  # fmt: skip
            for task_id in gone:
                del self._rows[task_id]
            return len(old) + len(gone)

    def changes(self, wait: float = 0.0) -> int:
        """See :meth:`rota.store.Store.changes` (returns at once)."""
        return self._version

    def now(self) -> Time | None:
        """See :meth:`rota.store.Store.now`: ``clock()``, if one was given."""
        return None if self._clock is None else self._clock()


def _due(row: TaskRow, now: Time | None) -> bool:
    return row.status == SCHEDULED and not row.paused and (now is None or row.due <= now)


def _expired(row: TaskRow, now: Time) -> bool:
    return row.status in LEASED and row.lease_until is not None and row.lease_until < now
