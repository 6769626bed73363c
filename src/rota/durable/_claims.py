"""Claims: due runs taken from the store in batches, paced to the runner."""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from rota._core.task import Run
from rota._core.types import (
    Time,
)
from rota.store import Change, TaskRow

from ._commit import Completion, GroupCommit
from ._held import _engine_of, _parent, _tid
from ._rows import Held
from ._triage import Triage, _claimed_run

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

STORE_RETRY = 1.0
"""Seconds a runner waits before trying an unreachable store again."""

FAILURE_REPEAT = 60.0
"""Seconds before the same store error is logged again."""


class Claims(Triage):
    """Due runs claimed for the runners: up to ``_batch`` at once, no more than a
    runner can start soon (its pool's room, or its pace: ``_pace``, measured from
    ``_pace_from``), the completions waiting in ``_commits`` committed in the same
    transaction; a store that fails is noted (``_outage``, ``_failure``) and tried
    again after :data:`STORE_RETRY`. ``_unwritten``: a completion could not be
    recorded since the last that was."""

    __slots__ = (
        "_batch", "_commits", "_failure", "_outage", "_pace", "_pace_from", "_poll",
        "_unwritten",
    )  # fmt: skip

    _batch: int
    _commits: GroupCommit
    _failure: tuple[str, float] | None
    _outage: bool
    _pace: int
    _pace_from: tuple[Time, int, int] | None
    _poll: Time
    _unwritten: bool

    @abstractmethod
    def _commit_and_claim(
        self, batch: Sequence[Completion], now: Time, limit: int
    ) -> list[TaskRow]:
        """Commit completions and claim runs in one transaction (see Completions)."""

    def claim(
        self, now: Time, *, queued: bool = False, room: int | None = None
    ) -> Held | Run | None:
        """The next run for a runner: from this node's claimed batch, else a new claim
        of up to ``batch`` runs, and no more than ``room`` (what the runner's pool,
        if it has one, can start soon) or, without a pool, than it is expected to
        start within ``poll`` (:meth:`_paced`): the other due runs are left to
        other nodes.

        If the store fails, the error is logged (:meth:`_store_failed`) and nothing is
        claimed; :meth:`next_run_time` then has the runner try again after
        :data:`STORE_RETRY` seconds (the store's own reconnection backoff
        having run out).
        """
        try:
            task = self._claim_next(now, room)
        except Exception as exc:
            self._store_failed(exc)
            return None
        if task is not None and not queued:
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
        return task

    def _store_failed(self, exc: Exception) -> None:
        """A runner's read or claim failed: retry after :data:`STORE_RETRY`, and say
        what is wrong (the error itself: a corrupt file, a read-only file, a full disk
        and an unreachable server are different faults), once per distinct error a
        minute, however the failing and answering calls alternate."""
        self._outage = True
        what = f"{type(exc).__name__}: {exc}".strip()
        seen = self._failure
        at = time.monotonic()
        if seen is None or seen[0] != what or at - seen[1] >= FAILURE_REPEAT:
            self._failure = (what, at)
            logger.error(
                "the store failed (%s); retrying every %gs", what, STORE_RETRY, exc_info=exc
            )

    def _claim_next(self, now: Time, room: int | None) -> Held | Run | None:
        local, now = now, self.store_time(now)
        with self._hold:
            while self._buffer:
                task = self._buffer.popleft()
                lease = task if task.__class__ is Held else self._lease_of(task)
                if lease.lost or lease.cancelled:
                    self._abandon(task, lease)
                    continue
                if now < lease.until:
                    return task
                lease.lost = True  # not renewed in time: someone may have it now
                logger.warning("task %r: lease ran out before its run started", task.task_id)
                self._abandon(task, lease)
        batch = self._commits.lingering()  # a dispatcher's: committed with its claim
        if room is not None and room <= 0:  # the runner's pool is busy: only runs held
            if batch:
                self._commits.commit(batch)
            return None
        limit = self._paced(local) if room is None else min(room, self._batch)
        claimed = self._claim_from_store(now, limit, batch)
        if room is None:  # the claim the next pace is measured from
            self._pace_from = (local, len(self._buffer) + (claimed is not None), limit)
        if self._outage:
            if not self._unwritten:  # else: said once a completion is recorded again
                logger.warning("the store answers again")
            self._outage = False
        return claimed

    def _paced(self, now: Time) -> int:
        """How many runs a runner without a pool claims: as many as it is expected to
        start within :attr:`poll` seconds (those runs wait no longer for it than other
        nodes would take to see them), at most ``batch``.

        The pace is measured from the previous claim, if it was full: the time since
        it, over the runs it held (run meanwhile, one after another). The first
        claim takes one run, then the size follows the pace: runs of 50 µs and a
        0.1 s poll, a full ``batch``; runs of 1 s, one. O(1).
        """
        if self._pace_from is not None:
            at, count, limit = self._pace_from
            self._pace_from = None
            if count >= limit:  # full: more may have been due all along
                spent = now - at
                self._pace = (
                    self._batch
                    if spent <= 0
                    else max(1, min(self._batch, int(self._poll * count / spent)))
                )
        return self._pace

    def _claim_from_store(
        self, now: Time, limit: int, batch: Sequence[Completion] = ()
    ) -> Held | Run | None:
        """Claim up to ``limit`` runs; return the first to start, keep the rest in the batch.

        The completions of ``batch`` are committed in the claim's transaction
        (see :meth:`_commit_and_claim`). Claimed rows that turn out to need no
        run (skipped by a misfire policy, an action this node cannot import)
        are settled, and the claim goes on until a run is found or nothing is due.
        """
        now = self.store_time(now)
        mine = self._flying_head() if self._flying else None
        if mine is not None and mine <= now:  # a concurrent task held here may start a run
            if batch:
                self._commits.commit(batch)
                batch = ()
            run = self._reclaim(now)
            if run is not None:
                return run
        ready: list[Held | Run] = []
        while not ready:
            rows = (
                self._commit_and_claim(batch, now, limit)
                if batch
                else self._store.claim(self._node, now, limit, self._lease, self._actions.known())
            )
            batch = ()
            if not rows:
                return None
            moved: list[Time] = []
            ready = [task for row in rows if (task := self._decide(row, now, moved))]
            if moved:  # runs claimed with these that come after a moved one wait for it
                first = min(moved)
                for task in [t for t in ready if isinstance(t, Held) and t.row.due > first]:
                    ready.remove(task)
                    self._release(task.row)
        with self._hold:
            for task in ready:
                if task.__class__ is Held:
                    self._held[task.task_id] = task  # type: ignore[index]
                    continue
                assert isinstance(task, Run)  # the lease its task's first run here took
                lease, task_id = _parent(task), _tid(task)
                held = self._held.get(task_id)
                if held is None or held.fence != lease.fence:
                    self._held[task_id] = lease
            self._buffer.extend(ready[1:])
        return ready[0]

    def _reclaim(self, now: Time) -> Run | None:
        """The next run of a concurrent task whose lease this node holds, if one may
        start at ``now``: claimed by the engine under that lease (one fenced
        transaction per task looked at). A lease found lost is let go.
        O(such tasks)."""
        with self._hold:
            due = [
                (task_id, self._held[task_id])
                for task_id, (_, at) in self._flying.items()
                if at is not None and at <= now and task_id in self._held
            ]
        for task_id, lease in due:
            function = self._actions.function(lease.row.action)
            if lease.lost or lease.cancelled or function is None:
                self._untrack(task_id, lease.fence)
                continue

            def claim(
                row: TaskRow | None, function: Callable[..., object] = function
            ) -> Change[Any]:
                if row is None:
                    return Change(None)
                run, stops, new, requeued = _claimed_run(self._restored(function, row), now)
                return Change((run, stops), row=new, requeued=requeued)

            decided = self._store.modify(task_id, claim, fence=lease.fence)
            if decided is None or decided.row is None:
                lease.lost = True
                self._untrack(task_id, lease.fence)
                continue
            run, stops = decided.value
            self.replacing(stops)
            self._track(task_id, decided.row, lease.fence)
            if run is not None:
                return run  # type: ignore[no-any-return]
        return None
