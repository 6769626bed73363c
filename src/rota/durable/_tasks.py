"""StoredTasks: the table of a :class:`~rota.durable.DurableScheduler`, in a store.

What the runners drive (:class:`rota.Tasks`) over a store that any number
of processes share: claims of due rows under fenced leases, the triage of
claimed rows (misfire, unknown actions, unreadable rows, take-overs), the
shared leases of concurrent tasks, completions decided ahead and committed
in groups, and the keeper thread (heartbeat, wake-ups, clock steps, frozen
nodes). The engine decides every run, restored from its row.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from rota._core import validate as _validate
from rota._core.policy import RetryPolicy
from rota._core.types import (
    RunOutcome,
    Time,
)
from rota._scheduling.actions import fatal
from rota.store import Store

from ._actions import Actions
from ._claims import STORE_RETRY
from ._commit import GroupCommit
from ._held import _engine_of
from ._keeper import Keeper
from ._rows import Held
from ._triage import LeaseExpired

__all__ = ["STORE_RETRY", "LeaseExpired", "StoredTasks"]


class StoredTasks(Keeper):
    """The tasks of a durable scheduler, kept in ``store``: the :class:`rota.Tasks` a
    runner drives, one store transaction per claim and per (group of) completions.

    ``clock`` reads epoch seconds (the store's own time is used instead where the
    store keeps one); ``actions`` the actions this node runs; ``retry`` and
    ``backoff`` the scheduler's default retry policy, stored with each task that
    brings none; ``node`` its name in leases; ``lease``, ``poll``, ``batch``,
    ``max_expiries`` and ``group_commit`` as :class:`~rota.durable.DurableScheduler`
    documents them. Opens the store. Raises
    what ``store.open()`` raises.

    Invariants (checked by :meth:`check`): a run waiting in the claimed batch holds
    its lease here (``_held``) unless it was lost or cancelled meanwhile; a
    concurrent task tracked as in flight here (``_flying``) holds its lease here;
    with no runner driving the table, no keeper thread runs and nothing waits in
    the batch.
    """

    leases = True
    __slots__ = ()

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
        super().__init__(lock)
        self._node = node
        self._store = store
        self._actions = actions
        self._retry = retry
        self._backoff = backoff
        store.open()
        self._timed = store.now() is not None
        self._clock = self.store_clock if self._timed else clock
        self._lease = lease
        self._poll = poll
        self._batch = batch
        self._max_expiries = max_expiries
        self._group = group_commit
        # Each field's meaning and invariants are written beside its declaration, in
        # the class of the floor that keeps it (HeldRuns, Triage, Claims, Keeper)
        self._hold = threading.Lock()
        self._buffer = deque()
        self._held = {}
        self._flying = {}
        self._engines = []
        self._users = 0
        self._keeper = None
        self._keeper_stop = threading.Event()
        self._commits = GroupCommit(store, batch, self._recorded)
        self._outage = False
        self._unwritten = False
        self._stalled_error = ""
        self._failure = None
        self._pace = 1
        self._pace_from = None

    def check(self) -> None:
        """Assert the invariants of every floor (:meth:`check_held`,
        :meth:`check_keeper`). O(runs held here)."""
        self.check_held()
        self.check_keeper()

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
