"""StoredTasks: the table of a :class:`~rota.durable.DurableScheduler`, in a store.

What the runners drive (:class:`rota.Tasks`) over a store that any number
of processes share: claims of due rows under fenced leases, the triage of
claimed rows (misfire, unknown actions, unreadable rows, take-overs), the
shared leases of concurrent tasks, completions decided ahead and committed
in groups, and the keeper thread (heartbeat, wake-ups, clock steps, frozen
nodes). The engine decides every run, restored from its row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any

from rota import _validate
from rota._calls import Bound, prepare
from rota._engine import Engine, Run, Task, raiser, run_at, run_slot
from rota._policy import RetryPolicy
from rota._tasks import fatal
from rota._types import (
    CLAIMED,
    FINISHED,
    RELEASED,
    Action,
    GivenBack,
    Result,
    RunOutcome,
    Status,
    Time,
    epoch_shown,
)
from rota.store import Change, Edit, Store, TaskRow

from ._actions import Actions
from ._changes import StoredChanges
from ._commit import Committed, Completion, GroupCommit
from ._rows import Held, dump, never, new_tuple, outcome_row, restore, state_of

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

STORE_RETRY = 1.0
"""Seconds a runner waits before trying an unreachable store again."""

FAILURE_REPEAT = 60.0
"""Seconds before the same store error is logged again."""


STALLED = 2.0
"""Seconds a transaction on a server store must have run, at least, before the other
nodes end its session as a frozen node's (the lease, if longer)."""


class LeaseExpired(Exception):  # noqa: N818 - it names the event, as TimeoutError does
    """A run's lease expired ``max_expiries`` times: its holders kept dying or stalling.

    The run fails with this error (retried per the task's policy, like any
    failure) instead of being started again forever.
    """


class StoredTasks(StoredChanges):
    """The tasks of a durable scheduler, kept in ``store``: the :class:`rota.Tasks` a
    runner drives, one store transaction per claim and per (group of) completions.

    ``clock`` reads epoch seconds (the store's own time is used instead where the
    store keeps one); ``actions`` the actions this node runs; ``node`` its name in
    leases; ``lease``, ``poll``, ``batch``, ``max_expiries`` and ``group_commit`` as
    :class:`~rota.durable.DurableScheduler` documents them. Opens the store. Raises
    what ``store.open()`` raises.

    Invariants (checked by :meth:`check`): a run waiting in the claimed batch holds
    its lease here (``_held``) unless it was lost or cancelled meanwhile; a
    concurrent task tracked as in flight here (``_flying``) holds its lease here;
    with no runner driving the table, no keeper thread runs and nothing waits in
    the batch.
    """

    leases = True

    __slots__ = (
        "_batch",
        "_buffer",
        "_commits",
        "_engines",
        "_failure",
        "_flying",
        "_group",
        "_held",
        "_hold",
        "_keeper",
        "_keeper_stop",
        "_lease",
        "_max_expiries",
        "_outage",
        "_pace",
        "_pace_from",
        "_poll",
        "_stalled_error",
        "_unwritten",
        "_users",
    )

    def __init__(
        self,
        store: Store,
        lock: threading.RLock,
        clock: Callable[[], Time],
        actions: Actions,
        *,
        retry: RetryPolicy | None,
        backoff: Time,
        node: str,
        lease: Time,
        poll: Time,
        batch: int,
        max_expiries: int,
        group_commit: bool,
    ) -> None:
        super().__init__(store, lock, clock, actions, retry, backoff, node)
        self._lease = lease
        self._poll = poll
        self._batch = batch
        self._max_expiries = max_expiries
        self._group = group_commit
        self._hold = threading.Lock()  # guards the buffer and the held runs
        self._buffer: deque[Held | Run] = deque()  # claimed, not yet handed to a driver
        self._held: dict[str, Held] = {}  # claimed by this node, not yet completed
        # Engines of completed runs, reset, for claims to come: at most as many as runs
        # were held here at once
        self._engines: list[Engine] = []
        # Concurrent tasks (Overlap.allow(n), REPLACE) whose lease this node holds while
        # runs of theirs are in flight: when it may start another (None: not before one
        # of those ends). Their leases are in _held, as the first run claimed them.
        self._flying: dict[str, tuple[int, Time | None]] = {}  # (row version, when)
        self._users = 0  # runners driving this table
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()
        # Runners' completions, waiting for the committer thread (see complete_later)
        self._commits = GroupCommit(store, batch, self._recorded)
        self._outage = False  # the store failed a runner's claim: retry after STORE_RETRY
        self._unwritten = False  # a completion could not be recorded since the last that was
        self._stalled_error = ""  # the last failure of end_stalled, said once
        self._failure: tuple[str, float] | None = None  # the last store error logged, when
        self._pace = 1  # runs a runner without a pool claims next (see _paced)
        self._pace_from: tuple[Time, int, int] | None = None

    def check(self) -> None:
        """Assert the invariants written in the class's docstring. O(runs held here)."""
        with self._hold:
            for task in self._buffer:
                if isinstance(task, Held):
                    assert task.lost or task.cancelled or self._held.get(_tid(task)) is task
            for task_id in self._flying:
                assert task_id in self._held, task_id
            if self._users == 0:
                assert self._keeper is None
                assert not self._buffer

    def changed(self, task_id: str, row: TaskRow) -> None:
        """A scheduling call wrote ``row``: if it is a concurrent task held here, note
        when it may go on; wake the runners for its due time. O(1)."""
        if task_id in self._flying:
            self._track(task_id, row, row.fence)
        if self.wakeups:
            self.wake(row.due)

    def wake_time(self) -> Time | None:
        """When a runner must look again: :meth:`next_run_time`, or the expiry of a
        lease of this node's own if sooner (a run whose completion it could not
        record stays leased to it: a lone node must wake to run it again). An
        unreachable store means "try again in :data:`STORE_RETRY` seconds"."""
        if not self._outage:
            try:
                head = self._store.next_due(self._node, self._actions.known(), own=True)
            except Exception as exc:
                self._store_failed(exc)
            else:
                mine = self._flying_head()
                return head if mine is None or (head is not None and head <= mine) else mine
        return _validate.time_from("the clock", self._clock()) + STORE_RETRY

    def status_of(self, row: TaskRow) -> Status:
        """A stored task's status as this process sees it: a run this node claimed
        ahead of its pool's workers is ``queued`` until one starts it (the store
        says ``running`` from the claim on: other processes cannot tell). O(1)."""
        status = Status(row.status)
        if status is CLAIMED and self._held:
            with self._hold:
                held = self._held.get(row.task_id)
                if held is not None and held.fence == row.fence:
                    return held.status
        return status

    def cancelled_here(self, task_id: Hashable) -> None:
        """The task's run held by this node (if any) belongs to a cancelled task: it
        does not start, and its completion is only reported (as in memory)."""
        with self._hold:
            held = self._held.get(task_id)  # type: ignore[call-overload]
            if held is not None:
                held.cancelled = True

    def tick(self, now: Time) -> list[RunOutcome]:
        """As :meth:`rota.Scheduler.tick`, one claim and one completion per run.

        A run cut short by an interrupt between them keeps its lease until it
        expires; then it is run again (at-least-once, same idempotency key).
        """
        _validate.finite("now", now)
        outcomes: list[RunOutcome] = []
        while True:
            task = self._claim_from_store(now, 1)
            if task is None:
                return outcomes
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
            error = self.call(task)
            outcomes.append(self.complete(task, error, now, now))
            if error is not None and fatal(error):
                raise error

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

    def _decide(self, row: TaskRow, now: Time, moved: list[Time]) -> Held | Run | None:
        """Turn a claimed row into a run to start, or settle it (and return ``None``).

        A run its misfire policy moved to a later slot is given back at that
        slot's time, which is appended to ``moved``."""
        function = self._actions.function(row.action)
        if function is None:
            self._release(row)
            return None
        if row.unreadable is not None:
            self._refuse(row, row.unreadable)
            return None
        try:
            task = self._restored(function, row, again=row.reclaimed)
        except Exception as exc:  # a spec this rota cannot read (a newer one wrote it?)
            self._refuse(row, repr(exc))
            return None
        assert task.plan is not None
        if row.reclaimed:
            logger.warning(
                "task %r: took over its run at %s from an expired lease (expiry %d)",
                row.task_id,
                epoch_shown(row.due),
                row.expiries,
            )
        if task.plan.concurrent:
            return self._claim_run(task, now, moved)
        if row.reclaimed:
            if row.expiries >= self._max_expiries:
                self._fail_expired(task, task.engine, row, now)
                return None
        else:
            claimed = task.engine.claim(now, queued=True)
            plan = task.plan
            # (a plan without controls, plan.extra false, is not changed by a claim)
            if claimed is None or (plan.extra and task.row.state != state_of(plan)):
                # The misfire policy decided: store its decision. A run it moved to a
                # later slot is given back at that time, to be claimed in time order
                # with every other task's runs (as in memory); so is one it ended.
                settled = claimed is None
                new, requeued = dump(task, keep_lease=not settled)
                decided = self._store.modify(
                    row.task_id,
                    lambda _: Change(None, row=new, requeued=requeued),
                    fence=row.fence,
                )
                if decided is None or settled:
                    if decided is not None and requeued:
                        moved.append(new.due)
                    return None
                task.row = new
        task.until = now + self._lease
        return task

    def _restored(
        self, function: Callable[..., object], row: TaskRow, *, again: bool = False
    ) -> Held:
        """A claimed row's task, its action bound to it (the run's facts: id, fence),
        in ``queued`` (taken over: ``again``) or ``scheduled`` to be claimed."""
        action = self._bind(function, row)
        if isinstance(action, Bound):  # before the restore and the claim: a concurrent
            action.bind(row.task_id, None)  # task's runs are bound to copies made then
            action.fence, action.expiries = row.fence, row.expiries
        status = Status.QUEUED if again else Status.SCHEDULED
        try:  # (list.pop is atomic: claims on other threads pop engines too)
            engine: Engine | None = self._engines.pop()
        except IndexError:
            engine = None
        task = restore(row, action, status, again=again, engine=engine)
        if isinstance(action, Bound):
            action.plan = task.plan
        return task

    def _claim_run(self, task: Held, now: Time, moved: list[Time]) -> Run | None:
        """:meth:`_decide` for a concurrent task (``Overlap.allow(n)``, ``REPLACE``): the
        engine claims a run of its own (one whose lease expired elsewhere first), and
        the task, with it in flight, is stored under this node's lease. A run taken
        over too many times fails with :class:`LeaseExpired`."""
        row = task.row
        run, stops, new, requeued = _claimed_run(task, now)
        decided = self._store.modify(
            row.task_id, lambda _: Change(None, row=new, requeued=requeued), fence=row.fence
        )
        if decided is None:
            return None
        task.row = new
        task.until = now + self._lease
        self.replacing(stops)
        self._track(row.task_id, new, row.fence)
        if run is None:
            if requeued:
                moved.append(new.due)
            return None
        assert isinstance(run, Run)
        if row.reclaimed and row.expiries >= self._max_expiries:
            self._fail_expired(run, task.engine, row, now)
            return None
        return run

    def _fail_expired(self, run: Held | Run, engine: Any, row: TaskRow, now: Time) -> None:
        """A run taken over ``max_expiries`` times (a poison pill: it kills or stalls
        every node that starts it) fails with :class:`LeaseExpired` instead of starting
        again; its schedule goes on."""
        engine.start(run)
        error = LeaseExpired(
            f"the lease of task {row.task_id!r}'s run at {run_at(run)!r} expired "
            f"{row.expiries} times"
        )
        self.complete(run, error, now, now)

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

    def _flying_head(self) -> Time | None:
        """The earliest time a concurrent task held here may start a run, or ``None``."""
        if not self._flying:
            return None
        with self._hold:
            return min((at for _, at in self._flying.values() if at is not None), default=None)

    def _track(self, task_id: str, row: TaskRow, fence: int) -> None:
        """A concurrent task's row as just written under this node's lease ``fence``:
        remember when it may start another run (its due time, unless every run it may
        have is in flight), or forget it if the lease was let go. Writes committed out
        of order (a claim and a completion on two threads) keep the newest."""
        if row.owner != self._node or (row.status in FINISHED and not row.state.get("flying")):
            self._untrack(task_id, fence)
            return
        at = None if row.state.get("full") else row.due
        with self._hold:
            seen = self._flying.get(task_id)
            if seen is None or seen[0] <= row.version:
                self._flying[task_id] = (row.version, at)
        if at is not None and self.wakeups:
            self.wake(at)

    def _untrack(self, task_id: str, fence: int) -> None:
        """This node holds no lease of concurrent task ``task_id`` under ``fence`` any
        more: no heartbeat renews it, no run of it is started here."""
        with self._hold:
            self._flying.pop(task_id, None)
            held = self._held.get(task_id)
            if held is not None and held.fence == fence:
                del self._held[task_id]

    def _refuse(self, row: TaskRow, why: str) -> None:
        """A claimed row this node cannot read (its JSON is corrupt, or a newer rota
        wrote what this one does not know): logged once, left as it is, and never
        claimed here again. Its lease is not renewed, so once it runs out a node that
        can read the row takes the run over. O(refused)."""
        if self._actions.refuse(row.task_id):
            logger.error(
                "task %r: this process cannot read its stored row (%s) and claims it no "
                "more; the row is left as it is",
                row.task_id,
                why,
            )

    def _bind(self, function: Callable[..., object], row: TaskRow) -> Action:
        """The call of a stored action; a call shape that no longer fits fails the run."""
        try:
            return prepare(function, row.spec["args"], row.spec["kwargs"])
        except TypeError as exc:
            return raiser(exc)

    def _release(self, row: TaskRow) -> None:
        """Give a claimed, unstarted run back: claimable again at once, nothing counted."""

        def give_back(current: TaskRow | None) -> Change[None]:
            assert current is not None
            current.status = str(RELEASED)
            current.owner = current.lease_until = None
            return Change(None, row=current)

        self._store.modify(row.task_id, give_back, fence=row.fence)

    def _give_back(self, task: Held | Run, error: GivenBack, started: Time) -> RunOutcome:
        """A run its node stopped (:class:`GivenBack`): released as claimed, nothing
        recorded; its outcome, ``retry``, is only reported. If the store cannot take
        the release, the lease runs out and the run is taken over all the same (as a
        concurrent task's run always is: its lease is its task's, with other runs)."""
        if isinstance(task, Run):
            logger.info(
                "task %r: its run at %s was stopped by this node's shutdown: it runs again "
                "(same key) once the task's lease runs out",
                task.task_id,
                epoch_shown(run_at(task)),
            )
            self._untrack(_tid(task), _parent(task).fence)
            return self._given_back(task, error, started)
        with self._hold:
            self._held.pop(task.task_id, None)  # type: ignore[call-overload]
        try:
            self._release(task.row)
        except Exception:
            logger.exception(
                "task %r: its run at %s could not be given back; it is taken over once "
                "its lease expires",
                task.task_id,
                epoch_shown(run_at(task)),
            )
        else:
            logger.info(
                "task %r: its run at %s was stopped by this node's shutdown and given back: "
                "it runs again (same key) on the next node to claim it",
                task.task_id,
                epoch_shown(run_at(task)),
            )
        return self._given_back(task, error, started)

    def _given_back(self, task: Held | Run, error: GivenBack, started: Time) -> RunOutcome:
        """The outcome reported for a run given back: ``retry``, recorded nowhere."""
        assert task.plan is not None
        outcome = RunOutcome(
            task.task_id, run_at(task), Result.RETRY, error, task.plan.attempt, started
        )
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def _lease_of(self, task: Held | Run) -> Held:
        """The lease a claimed run is held under: its own, or, for a run of a concurrent
        task, the one the task's first run here took, which the heartbeat renews (its
        task as restored, if this node holds that lease no more). O(1)."""
        if isinstance(task, Held):
            return task
        parent = _parent(task)
        held = self._held.get(_tid(task))
        return held if held is not None and held.fence == parent.fence else parent

    def _abandon(self, task: Held | Run, lease: Held) -> None:
        """A claimed run this node will not start (its lease ran out first, or was lost,
        or its task was cancelled): its lease is renewed no more, so that it runs out
        and whoever claims next (this node too) takes the run over, rather than this
        node's heartbeat keeping a run no one runs. Called under ``_hold``. O(1)."""
        task_id = _tid(task)
        if self._held.get(task_id) is lease:
            del self._held[task_id]
            self._flying.pop(task_id, None)  # a concurrent task's runs share that lease

    def start(self, task: Held | Run) -> bool:
        """A worker picks up a claimed run: ``False`` if it was cancelled or its lease lost."""
        lease = task if task.__class__ is Held else self._lease_of(task)
        if lease.cancelled or lease.lost:
            with self._hold:
                self._abandon(task, lease)
            return False
        with self._hold:  # status() reads it under the same lock
            (task.engine if task.__class__ is Held else _engine_of(task)).start(task)
        return True

    def complete(
        self, task: Held | Run, error: BaseException | None, started: Time, finished: Time
    ) -> RunOutcome:
        """Record a run's end in one fenced transaction: the engine decides from the row.

        If the lease was lost meanwhile, nothing is written (the new holder's
        outcome counts); the run's outcome is still returned, as this node
        saw it, and the loss is logged. Raises what the store raises.
        """
        if isinstance(error, GivenBack):
            return self._give_back(task, error, started)
        edit, outcome = self._decided(task, error, started, finished)
        return self._settled(task, self._store.modify_many([edit])[0], outcome, error)

    def complete_later(
        self,
        task: Held | Run,
        error: BaseException | None,
        started: Time,
        finished: Time,
        then: Callable[[RunOutcome], object],
        *,
        linger: bool = False,
    ) -> None:
        """Complete a run for a runner: decided here, committed with others.

        While a runner drives this scheduler (with ``group_commit``, the
        default), the caller (the dispatcher, a pool worker, the event loop)
        hands the completion to the committer thread and goes on with its
        next run at once, so running overlaps committing (an fsync, a round
        trip). The committer commits all the completions that queued while it
        committed the previous ones in one transaction (group commit), then
        reports each through ``then``: an outcome is reported only once it is
        durable. Idle, a completion is committed at once, alone.

        ``linger`` (a dispatcher that runs its claims itself, and so claims
        again as soon as its claimed batch is run): the completion waits for
        that next claim, which commits the batch's completions in its own
        transaction on the dispatcher's thread (:meth:`_claim_next`), with no
        thread to wake per completion (the committer reports them, once per
        batch: :meth:`GroupCommit.deliver`); completions left waiting
        :data:`~rota.durable._commit.LINGER` seconds after the last one (a
        long run in the batch) are committed by the committer.

        At most ``batch`` completions wait: a caller finding that many waits
        for room. A crash before the commit only means the run starts again
        after its lease (at-least-once, same key). Without a committer
        (``group_commit=False``, no runner, or its runner stopping) the
        completion is committed on the caller's thread, one transaction
        each. O(1) here, besides waiting for room.
        """
        if isinstance(error, GivenBack):
            then(self._give_back(task, error, started))
            return
        edit, outcome = self._decided(task, error, started, finished)
        completion: Completion = new_tuple(Completion, (edit, task, outcome, error, then))
        if not self._commits.hand_over(completion, linger=linger):
            self._commits.commit([completion])

    def _commit_and_claim(
        self, batch: Sequence[Completion], now: Time, limit: int
    ) -> list[TaskRow]:
        """Commit completions and claim up to ``limit`` runs in one store transaction
        (one commit, one fsync), report the completions, return the claimed rows.

        If that transaction fails, the completions are committed on their own
        (:meth:`GroupCommit.commit`, with its fallbacks) and the claim is made alone,
        raising what it raises. O(len(batch) + limit).
        """
        try:
            results, rows = self._store.complete_and_claim(
                [c.edit for c in batch], self._node, now, limit, self._lease, self._actions.known()
            )
        except Exception:
            self._commits.commit(batch)
            return self._store.claim(self._node, now, limit, self._lease, self._actions.known())
        self._commits.deliver(batch, results)
        return rows

    def _recorded(self, completion: Completion, result: Committed) -> RunOutcome:
        """The outcome to report for a completion the committer committed (or could not)."""
        task, outcome = completion.task, completion.outcome
        if isinstance(result, Exception):
            return self._unrecorded(task, outcome, result)
        return self._settled(task, result, outcome, completion.error)

    def _unrecorded(self, task: Held | Run, outcome: RunOutcome, exc: Exception) -> RunOutcome:
        """A completion the store could not take (down, unreachable): logged, reported.

        Nothing is lost: the run's lease runs out, and it is run again, by this
        node or another, with the same idempotency key (at-least-once). (A
        concurrent task's lease is let go for it: this node renews it no more.)
        """
        if isinstance(task, Run):
            self._untrack(_tid(task), _parent(task).fence)
        self._unwritten = True
        logger.error(
            "task %r: the completion of its run at %s could not be recorded (%r); the run "
            "will be taken over when its lease expires",
            task.task_id,
            epoch_shown(run_at(task)),
            exc,
        )
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    def _decided(
        self, task: Held | Run, error: BaseException | None, started: Time, finished: Time
    ) -> tuple[Edit, RunOutcome]:
        """The fenced completion of a run, decided in advance from the row as claimed.

        Written as it is if the row did not change meanwhile (the usual case:
        one UPDATE, no read); otherwise ``complete`` decides again inside the
        transaction, from the row as it is then.
        """
        if task.__class__ is not Held:
            return self._decided_run(task, error, started, finished)  # type: ignore[arg-type]
        with self._hold:  # its run is over: no more heartbeats for it
            self._held.pop(task.task_id, None)  # type: ignore[call-overload]
        value = task.value
        if self._timed:
            started, finished = self._shifted(started, finished)
        claimed = task.row
        engine = task.engine
        outcome = engine.complete(task, error, started, finished)
        new, requeued = dump(task, keep_lease=False)
        # The engine served this run alone, and it and the task refer to each other:
        # unlinked, the task is freed by reference counting, not later by the cyclic
        # collector's passes (bench/results/instructions.md); the engine, reset,
        # serves a claim to come.
        del task.engine
        engine.reset()
        self._engines.append(engine)
        record = outcome_row(claimed, outcome, finished)
        expected = Change(outcome, row=new, outcome=record, requeued=requeued)
        # Changes that waited for this run change the spec: written by the full path.
        ahead = None if "pending" in claimed.state else (claimed.version, expected)
        complete = partial(_complete_row, task.action, value, error, started, finished)
        edit: Edit = new_tuple(Edit, (claimed.task_id, complete, task.fence, ahead))
        return edit, outcome

    def _shifted(self, started: Time, finished: Time) -> tuple[Time, Time]:
        """A run's times shifted onto the store's clock, which decides (it keeps one):
        it finished now by that clock, after running as long as it did. O(1)."""
        own = self._store.now()
        return (started, finished) if own is None else (own - (finished - started), own)

    def _decided_run(
        self, run: Run, error: BaseException | None, started: Time, finished: Time
    ) -> tuple[Edit, RunOutcome]:
        """:meth:`_decided` for a run of a concurrent task: the engine completes the run
        of that slot in the row as it is at the commit (other runs of the task start and
        end meanwhile), under the task's lease; the outcome is recorded for the run's
        own slot."""
        value = run.value
        if self._timed:
            started, finished = self._shifted(started, finished)
        parent = _parent(run)
        slot = run_slot(run)
        outcome = parent.engine.complete(run, error, started, finished)

        def complete(row: TaskRow | None) -> Change[RunOutcome]:
            assert row is not None
            fresh = restore(row, never)
            mine = fresh.engine.run_of(fresh, slot)
            if mine is None:  # its task was scheduled anew meanwhile: recorded, no more
                return Change(outcome, outcome=outcome_row(row, outcome, finished, slot))
            mine.value = value
            result = fresh.engine.complete(mine, error, started, finished)
            again, queued = dump(fresh, keep_lease=True)
            record = outcome_row(row, result, finished, slot)
            return Change(result, row=again, outcome=record, requeued=queued)

        return Edit(_tid(run), complete, parent.fence), outcome

    def _settled(
        self,
        task: Held | Run,
        decided: Change[Any] | None,
        outcome: RunOutcome,
        error: BaseException | None,
    ) -> RunOutcome:
        """The outcome of a committed (or fenced-off) completion; wakes runners, emits."""
        if self._unwritten:
            self._unwritten = False
            logger.warning("the store records completions again")
        if decided is None:
            # cancelled (and its id reused) while it ran: only reported
            if (task if task.__class__ is Held else self._lease_of(task)).cancelled:
                outcome = outcome._replace(result=Result.FAILED if error else Result.OK)
            else:
                logger.warning(
                    "task %r: lease lost before its run at %s completed; its outcome is not "
                    "recorded (the run was taken over)",
                    task.task_id,
                    epoch_shown(outcome.at),
                )
        else:
            outcome = decided.value
            if task.__class__ is Held:
                if self.wakeups and decided.requeued and decided.row is not None:
                    self.wake(decided.row.due)
            elif decided.row is not None:
                self._track(_tid(task), decided.row, _parent(task).fence)  # type: ignore[arg-type]
        if decided is None and task.__class__ is not Held:
            self._untrack(_tid(task), _parent(task).fence)  # type: ignore[arg-type]
        if self.listeners:
            self.emit_outcome(outcome)
        return outcome

    # -- runners: heartbeat, wake-ups, release on stop -----------------------

    def subscribe(self, callback: Callable[[Time], object]) -> Callable[[], None]:
        """A runner starts driving this scheduler: keep its leases, watch the store,
        commit its completions (the heartbeat and committer threads)."""
        unsubscribe = super().subscribe(callback)
        with self._hold:
            self._users += 1
            if self._keeper is None:
                self._keeper_stop.clear()
                self._keeper = self._thread(self._keep, "rota-heartbeat")
                self._keeper.start()
                if self._group:
                    self._commits.start(self._thread)

        def stop() -> None:
            unsubscribe()
            with self._hold:
                self._users -= 1
                last = self._users == 0
                keeper, committer, buffered = self._keeper, None, list(self._buffer)
                if last:
                    # the committer commits and reports what it has, then ends
                    committer = self._commits.stop()
                    self._keeper, self._buffer = None, deque()
                    for task in buffered:
                        self._held.pop(task.task_id, None)  # type: ignore[call-overload]
            if last:
                self._keeper_stop.set()
                for thread in (committer, keeper):
                    if thread is not None and thread is not threading.current_thread():
                        thread.join()
                for task in buffered:
                    if isinstance(task, Held):
                        self._release(task.row)
                    else:  # a concurrent task's: left to its lease (other runs share it)
                        self._untrack(_tid(task), _parent(task).fence)

        return stop

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread (not started) that runs ``target``, then gives back its
        store connection."""

        def run() -> None:
            try:
                target()
            finally:
                self.thread_done()

        return threading.Thread(target=run, name=name, daemon=True)

    def thread_done(self) -> None:
        """A thread is done with this scheduler: close the store connections it opened."""
        self._store.release()

    def _keep(self) -> None:
        """The heartbeat thread: renew leases every ``lease / 3``; wake runners on writes."""
        beat_every = self._lease / 3
        last_beat = -float("inf")  # monotonic: a step of the wall clock stops no heartbeat
        last_read: tuple[Time, float] | None = None  # (clock, monotonic) at the last loop
        # Listing the stored actions reads every live row (O(tasks)): on a thread of its
        # own, so that no lease waits for it
        self._thread(self._warn_unknown, "rota-actions").start()
        interval = min(self._poll, beat_every)
        while not self._keeper_stop.is_set():
            began = time.monotonic()
            try:
                # Blocks up to `interval` on a store that hears of changes (PostgreSQL's
                # LISTEN): another node's write wakes this one at once.
                self._store.changes(interval)
                now = _validate.time_from("the clock", self._clock())
                mono = time.monotonic()
                if last_read is not None:
                    self._check_step(now - last_read[0] - (mono - last_read[1]), now)
                last_read = (now, mono)
                if mono - last_beat >= beat_every:
                    self._heartbeat(now)
                    last_beat = mono
                    self._store.beat(self._node, self.store_time(now), self._lease)
                    self._end_stalled()
                # The head, every poll (one indexed read): a write another node made
                # for later is not notified, and nothing else would tell this one
                head = self.wake_time()
                if head is not None:
                    self.wake(head)
            except Exception:
                logger.exception("heartbeat failed; retrying")
            self._keeper_stop.wait(max(0.0, interval - (time.monotonic() - began)))

    def _end_stalled(self) -> None:
        """A node frozen inside a transaction holds its rows until it wakes, whatever
        the server's timeouts: its session is ended once its transaction outlived a
        lease (:meth:`~rota.store.Store.end_stalled`). A failure is logged (once a
        distinct error) and changes nothing else."""
        try:
            self._store.end_stalled(max(self._lease, STALLED))
        except Exception as exc:
            what = f"{type(exc).__name__}: {exc}"
            if what != self._stalled_error:
                self._stalled_error = what
                logger.warning("cannot end the sessions of frozen nodes: %s", what)

    def _check_step(self, jump: float, now: Time) -> None:
        """The scheduler's clock moved ``jump`` seconds more than the monotonic clock
        since the last look: the host's wall clock stepped (NTP correcting a drifted
        VM, a laptop waking). A step back of more than two leases is acted on (a
        shorter one stretches a lease by less than that): the leases written before
        it, by this node or by one that died since, would last ``-jump`` too long,
        so the store gives them back their length
        (:meth:`~rota.store.Store.shift_leases`; a store that keeps its own time
        needs nothing). A manual clock's moves are a test's."""
        if jump >= -2 * self._lease or hasattr(self._clock, "on_change"):
            return
        back = -jump
        logger.warning(
            "the clock stepped back by %.1fs; shortening the leases written before", back
        )
        shift = getattr(self._store, "shift_leases", None)
        if shift is not None and self._store.now() is None:
            shift(now + back / 2, back)

    def _warn_unknown(self) -> None:
        """Say which stored actions this process will leave to others (it cannot run them)."""
        try:
            names = self._store.actions()
        except Exception:
            if self._users:  # (a runner stopped meanwhile may have closed the store)
                logger.exception("could not list the stored actions")
            return
        known = self._actions.known()
        for name in sorted(n for n in names if n not in known):
            if ":" in name:
                logger.warning(
                    "import path %r was not declared by this process and its imports= "
                    "option does not admit it: its tasks are left to a process that runs "
                    "it (never deleted; see docs/security.md)",
                    name,
                )
            else:
                logger.warning(
                    "action %r is not registered here: its tasks are left to a process "
                    "that registers it (never deleted)",
                    name,
                )

    def _heartbeat(self, now: Time) -> None:
        """Extend this node's leases; learn which runs were lost or cancelled meanwhile."""
        with self._hold:
            ids = [task_id for task_id, task in self._held.items() if not task.lost]
        if not ids:
            return
        now = self.store_time(now)
        held = self._store.heartbeat(self._node, now, self._lease, ids)
        with self._hold:
            for task_id, task in self._held.items():
                mine = held.get(task_id)
                if mine is None or mine[0] != task.fence:
                    if not task.lost:
                        logger.warning(
                            "task %r: lease lost (%s)", task_id,
                            "taken over elsewhere" if mine is None
                            else "it ran out, and this node took the run over itself",
                        )  # fmt: skip
                    task.lost = True
                elif mine[1] == Status.CANCELLED:
                    task.cancelled = True
                else:
                    task.until = now + self._lease
            # A concurrent task whose runs this node holds, with no room for another when
            # last written here, is looked at again: another process may have changed it
            # since (resumed, triggered, rescheduled), and only this node may claim it.
            for task_id, (version, at) in list(self._flying.items()):
                if at is None:
                    self._flying[task_id] = (version, now)


def _claimed_run(task: Held, now: Time) -> tuple[Task | None, list[Run], TaskRow, bool]:
    """A concurrent task's next run claimed by its engine at ``now`` (``None``: none may
    start), the runs ``REPLACE`` stops for it, and the row to store (its lease kept while
    a run is in flight) with whether its run was queued anew. O(runs in flight)."""
    run = task.engine.claim(now, queued=True)
    stops = task.engine.take_stops()
    new, requeued = dump(task, keep_lease=True)
    return run, stops, new, requeued


def _complete_row(
    action: Action,
    value: object,
    error: BaseException | None,
    started: Time,
    finished: Time,
    row: TaskRow | None,
) -> Change[RunOutcome]:
    """A run's completion decided again from its row as it is at the commit (changed
    since the claim: cancelled, paused, rescheduled by another process meanwhile).
    A function, not a closure over the run, for :func:`functools.partial`: two objects
    for the cyclic collector to track while the completion waits, not six."""
    assert row is not None
    status = Status.CANCELLED if row.status == Status.CANCELLED else Status.RUNNING
    fresh = restore(row, action, status)
    fresh.value = value
    result = fresh.engine.complete(fresh, error, started, finished)
    again, queued = dump(fresh, keep_lease=False)
    return Change(result, row=again, outcome=outcome_row(row, result, finished), requeued=queued)


def _parent(run: Run) -> Held:
    """The task a concurrent task's run was claimed from, as restored then."""
    parent = run.parent
    assert isinstance(parent, Held)
    return parent


def _tid(task: Task) -> str:
    """A stored task's id (always a str; a run's entry may hold a key of the engine's
    while it waits for a retry: its task's, then)."""
    task_id = (task.parent if isinstance(task, Run) else task).entry[2]
    assert isinstance(task_id, str)
    return task_id


def _engine_of(task: Task) -> Any:
    """The engine a claimed run belongs to: its task's (a concurrent task's run: the
    engine its task was restored into when the run was claimed)."""
    return task.parent.engine if isinstance(task, Run) else task.engine  # type: ignore[attr-defined]
