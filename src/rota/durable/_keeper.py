"""The keeper: the thread that renews the leases of this node while a runner drives it."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from rota._core import validate as _validate
from rota._core.types import (
    Status,
    Time,
)

from ._completion import Completions
from ._held import _parent, _tid
from ._rows import Held

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

STALLED = 2.0
"""Seconds a transaction on a server store must have run, at least, before the other
nodes end its session as a frozen node's (the lease, if longer)."""

LISTEN_SLICE = 0.5
"""Seconds the keeper listens for changes (or waits) at most before it looks whether
it is stopped: ``stop()`` returns within about that, whatever the ``poll``."""

HEARD_PACE = 0.002
"""Seconds the keeper waits, at most, after a change it heard before it listens again:
bounds its reads of the head (one each loop) in a burst of other nodes' writes."""


class Keeper(Completions):
    """While runners drive the table (``_users`` of them), the keeper thread
    (``_keeper``, stopped by ``_keeper_stop``) renews the leases held here, watches the
    store for other nodes' writes, acts on clock steps, ends frozen nodes'
    transactions (its last failure, said once, in ``_stalled_error``) and says which
    stored actions this node leaves to others; with ``_group``, a committer thread
    commits completions in groups.

    Invariant (:meth:`check_keeper`): with no runner driving the table, no keeper
    thread runs and no claimed run waits.
    """

    __slots__ = ("_group", "_keeper", "_keeper_stop", "_stalled_error", "_users")

    _group: bool
    _keeper: threading.Thread | None
    _keeper_stop: threading.Event
    _stalled_error: str
    _users: int

    def check_keeper(self) -> None:
        """Assert the invariant above. O(1)."""
        with self._hold:
            if self._users == 0:
                assert self._keeper is None
                assert not self._buffer

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
        heard: int | None = None
        looked = -float("inf")  # monotonic: the last look at the head
        while not self._keeper_stop.is_set():
            # At most LISTEN_SLICE at a time, so that a stop is seen soon whatever the poll
            asked = max(0.0, min(looked + interval - time.monotonic(), LISTEN_SLICE))
            began, seen = time.monotonic(), heard
            try:
                # Blocks up to `asked` on a store that hears of changes (PostgreSQL's
                # LISTEN): another node's write wakes this one at once.
                seen = self._store.changes(asked)
                mono = time.monotonic()
                if seen == heard and mono < looked + interval:
                    continue  # nothing heard, no poll due (the finally paces the loop)
                looked = mono
                now = _validate.time_from("the clock", self._clock())
                if last_read is not None:
                    self._check_step(now - last_read[0] - (mono - last_read[1]), now)
                last_read = (now, mono)
                if mono - last_beat >= beat_every:
                    self._heartbeat(now)
                    last_beat = mono
                    self._store.beat(self._node, self.store_time(now), self._lease)
                    self._end_stalled()
                # The head, every poll and on every change heard (one indexed read): a
                # write another node made for later is not notified, and nothing else
                # would tell this one
                head = self.wake_time()
                if head is not None:
                    self.wake(head)
            except Exception:
                logger.exception("heartbeat failed; retrying")
                looked = time.monotonic()  # (after a poll's time)
            finally:
                # Paced: a polled store answers at once, so the rest of what was asked
                # is waited out here; after a change heard, back to listening almost at
                # once: a write in the rest of the interval (a run woken by its
                # upstream's end, say) would wait for the next poll otherwise.
                rest = asked - (time.monotonic() - began) if seen == heard else HEARD_PACE
                heard = seen
                self._keeper_stop.wait(max(0.0, rest))

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
