"""DurableScheduler: the Scheduler API over a durable store."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from rota._core import validate as _validate
from rota._core.moves import calendared
from rota._core.policy import RetryOn, RetryPolicy, Schedule
from rota._core.pools import Pool
from rota._core.types import Time
from rota._scheduling.scheduler import MONOTONIC_CLOCKS, Clock, Scheduler
from rota.calendars import Calendar
from rota.misfire import Misfire
from rota.overlap import Overlap
from rota.store import Store

from ._actions import Actions
from ._tasks import StoredTasks

logger = logging.getLogger("rota.durable")
"""Leases lost and taken over, actions no node here knows, store faults."""

F = TypeVar("F", bound=Callable[..., Any])
_UNSET: Any = object()


class DurableScheduler(Scheduler):
    """A :class:`~rota.Scheduler` whose tasks live in a durable store.

    Same API, same meaning (retries, backoff, misfire policies, priorities,
    pause, the six statuses, ``tick`` for tests, every runner in real time);
    what changes is durability: once a ``schedule*`` call returns, the task
    is in ``store`` and survives restarts and ``kill -9``; any number of
    processes may share the store, each slot's completion is recorded once,
    and a run held by a dead process is taken over once its lease expires.
    Read ``docs/durability.md`` for the guarantees.

    What changes for tasks: ids are str; an action is a registered name
    (:meth:`register`), an import path ``"package.module:function"``, or a
    module-level function (stored as its import path); ``args``/``kwargs``
    are JSON; schedules, retry policies and ``retry_on`` are the built-in
    ones. Each is checked when scheduling.

    ``clock`` must read epoch seconds (``time.time``, the default, or a
    :class:`~rota.ManualClock` in tests); a monotonic clock is refused.
    ``node`` names this process in leases (default: host, pid and a random
    suffix); ``lease`` (seconds) is how long a claimed run is held without a
    heartbeat (renewed every ``lease / 3`` while a runner runs); ``poll``
    (seconds) is how often a runner looks for other processes' writes;
    ``batch`` the most runs claimed at once (a runner without a pool claims
    as many as it is expected to start within ``poll`` seconds, at the pace
    of its previous claims, so claimed runs wait no longer than other nodes
    would take to see them; one with a pool, as many as its workers can take
    soon); ``max_expiries`` the leases of
    one run that may expire (crashed or stalled holders) before it fails
    with :class:`LeaseExpired`; ``group_commit`` has a runner's completions
    committed together: a batch's, by a dispatcher that runs its claims
    itself, before it claims the next; those of a pool's workers, on a
    thread of their own, those that queue meanwhile in one transaction (see
    :meth:`StoredTasks.complete_later`; ``False``: each on the thread that ran it, one
    commit per completion). ``imports`` says which stored import paths this node
    runs, since whoever can write the store could name any (``docs/security.md``):
    by default only those this process stored itself (scheduled, ensured, declared
    by its job file) besides its registered names; ``True``: any it can import; a
    collection of prefixes (``["billing.", "reports.tasks:"]``): those starting
    with one. Tasks of other paths are left, untouched, to nodes that run them.

    Costs: each scheduling call, claim and completion is one store
    transaction (with :class:`~rota.store.SQLiteStore` and
    ``synchronous=FULL``, one fsync); queries read one row, or the earliest
    rows through an index.

    Raises ``TypeError``/``ValueError`` for bad arguments (a monotonic clock
    included), and what ``store.open()`` raises.
    """

    __slots__ = ("_actions", "_node", "_store", "_stored")

    def __init__(
        self,
        store: Store,
        clock: Clock = time.time,
        backoff: Time = 1,
        *,
        retry: RetryPolicy | None = None,
        node: str | None = None,
        lease: Time | timedelta = 30.0,
        poll: Time | timedelta = 0.1,
        batch: int = 128,
        max_expiries: int = 3,
        group_commit: bool = True,
        imports: bool | Collection[str] = False,
    ) -> None:
        if clock in MONOTONIC_CLOCKS:
            raise ValueError(
                f"clock {clock!r} is monotonic: its readings mean nothing to another process "
                "or after a restart; a durable scheduler needs epoch time (time.time, the default)"
            )
        super().__init__(clock, backoff, retry=retry, epoch=True)
        for method in (
            "modify",
            "claim",
            "heartbeat",
            "next_due",
            "get",
            "rows",
            "outcomes",
            "release",
            "complete_and_claim",
        ):
            if not callable(getattr(store, method, None)):
                raise TypeError(f"store must be a rota store (with {method}()), got {store!r}")
        lease = _validate.positive("lease", lease)
        poll = _validate.positive("poll", poll)
        _validate.at_least_one("batch", batch)
        _validate.count("max_expiries", max_expiries)
        if not isinstance(group_commit, bool):
            raise TypeError(f"group_commit must be a bool, got {group_commit!r}")
        if node is not None and not isinstance(node, str):
            raise TypeError(f"node must be a str, got {node!r}")
        self._node = node or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._actions = Actions(imports)
        self._store = store
        # The table: where the tasks live and what runners drive (opens the store)
        self._stored = StoredTasks(
            store, threading.RLock(), clock, self._actions, retry=retry, backoff=backoff,
            node=self._node, lease=lease, poll=poll, batch=batch, max_expiries=max_expiries,
            group_commit=group_commit,
        )  # fmt: skip
        self._table = self._stored
        self._clock = self._stored.clock  # the store's, if it keeps time

    def __repr__(self) -> str:
        return f"<DurableScheduler store={self._store!r} node={self._node!r}>"

    @property
    def store(self) -> Store:
        """The store this scheduler keeps its tasks in."""
        return self._store

    @property
    def node(self) -> str:
        """This process's name in leases."""
        return self._node

    # -- actions ---------------------------------------------------------

    def register(self, name: str, action: F) -> F:
        """Let tasks of this scheduler run ``action`` under ``name``; returns ``action``.

        Every process that shares the store and should run such tasks
        registers the same name; a process that does not know a name never
        claims its tasks (they wait, untouched, for one that does). O(1).
        Raises ``TypeError`` for a non-str name or a non-callable action,
        ``ValueError`` for an empty name, one with ``:`` (that is an import
        path) or one registered to another function.
        """
        self._actions.register(name, action)
        return action

    def action(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`register`: ``@scheduler.action("billing.sync")``."""

        def decorate(action: F) -> F:
            return self.register(name, action)

        return decorate

    # -- declarations and the record -----------------------------------------------

    def ensure(
        self,
        task_id: str,
        when: Schedule,
        action: Any,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        max_retries: int = 0,
        retry: RetryPolicy | None = None,
        retry_on: RetryOn | None = None,
        misfire: Misfire | None = None,
        priority: int = 0,
        owner: str | None = None,
        zone: str | None = None,
        overlap: Overlap | None = None,
        deadline: Time | timedelta | None = None,
        jitter: Time | timedelta | None = None,
        end: Time | datetime | None = None,
        max_runs: int | None = None,
        calendar: Calendar | None = None,
        on_excluded: str = "skip",
        after: Any = None,
        tags: Sequence[str] | None = None,
        pool: Pool | None = None,
    ) -> bool:
        r"""Make sure a task exists as declared: for tasks declared at every start-up.

        Idempotent across processes and restarts, so N workers (gunicorn)
        that all call it at start-up give one task, not N: absent, the task
        is added; present and unfinished with the same declaration, nothing
        changes (its cursor, retries and lease are kept); present with
        another declaration, the declaration is updated (a new schedule
        takes over as :meth:`reschedule` does; its run in flight goes on);
        finished (done, failed, or cancelled by someone), it is left alone.
        Returns ``True`` if it added or changed the task. Arguments and
        errors are :meth:`schedule`'s. One transaction.

        ``owner`` names who declares the task (``rota run`` gives its job
        file's path): it is stored with the task (``spec["owner"]`` of its row), and a
        finished task of a declaring owner comes back, as a new task, when its
        declaration changed (a job cancelled, or :meth:`remove`\ d, then edited
        or declared again); with the same declaration it stays finished.

        ``calendar``/``on_excluded``, ``after`` and ``pool`` are :meth:`schedule`'s; a
        declaration with another calendar is another declaration (its next run decided
        again).

        ``zone`` (an IANA name, ``"Europe/Berlin"``) is the zone the task's
        times are shown in by the command and the dashboard (``spec["zone"]``,
        :attr:`Entry.zone`); it changes nothing about when the task runs.

        ``tags`` (non-empty strings) label the task (``spec["tags"]``,
        :attr:`Entry.tags`): ``rota pause --tag`` and the dashboard's filter act on
        and show the tasks of a tag; changing them changes nothing else.
        """
        admitted, plan, first = self._admit(
            task_id, calendared(when, calendar, on_excluded), action, args, kwargs,
            (max_retries, retry, retry_on, misfire, priority),
            (overlap, deadline, jitter, end, max_runs, after, pool),
        )  # fmt: skip
        row = self._stored.row(task_id, first, admitted, plan)
        for name, value in (("owner", owner), ("zone", zone)):
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise TypeError(f"{name} must be a non-empty str or None, got {value!r}")
                row.spec[name] = value
        if tags is not None:
            row.spec["tags"] = _tags(tags)
        return self._stored.declare(row, owner)

    def remove(self, task_id: Hashable) -> bool:
        """Withdraw a task's declaration: it is cancelled as :meth:`cancel` does (a run
        in flight finishes; its history stays readable) and marked removed: no longer
        listed (:meth:`listing`), and declaring it again (:meth:`ensure` with an
        ``owner``) adds it anew. What ``rota run`` does to the jobs its file no
        longer declares. ``False`` if the task is unknown or finished. One
        transaction.
        """
        return self._stored.withdraw(task_id, remove=True)

    def prune(
        self, before: Time | None, *, batch: int = 10_000, keep_runs: int | None = None
    ) -> int:
        """Delete the record of the past: the outcomes of runs that finished before
        ``before`` (epoch seconds, or an aware ``datetime``; ``None``: no age limit),
        each task's outcomes beyond its newest ``keep_runs`` (``None``: no count limit),
        the audit entries and alerts older than ``before``, then the rows of finished
        tasks (done, failed, cancelled) due before it with no outcome left. Returns
        how many rows went. What ``[retention]`` has a node do every few minutes.

        Unfinished tasks and recent outcomes are untouched; a pruned task is as if it
        never existed (``status`` returns ``None``, ``ensure`` creates it anew). Runs
        in transactions of at most ``batch`` deletions each, so other processes keep
        working meanwhile. Costs: outcomes have no index on their finish time, so
        each transaction scans them (run it from a maintenance job, not per run).
        Raises ``TypeError``/``ValueError`` for a ``before`` that is not ``None``, a
        finite number or an aware datetime, a ``batch`` that is not a positive int,
        or a ``keep_runs`` that is not ``None`` or an int >= 0.
        """
        if before is not None:
            before = _validate.finite("before", before)
        _validate.at_least_one("batch", batch)
        if keep_runs is not None:
            _validate.count("keep_runs", keep_runs)
        total = 0
        while True:
            gone = self._store.ledger.trim(before, keep_runs, batch)
            if before is not None:
                gone += self._store.prune(before, batch)
            total += gone
            if gone == 0:
                return total


def _tags(tags: object) -> list[str]:
    """``ensure``'s ``tags``, sorted and without repeats; ``TypeError`` naming what is
    not a sequence of non-empty strings."""
    if isinstance(tags, str) or not isinstance(tags, Sequence | frozenset | set):
        raise TypeError(f"tags must be a list of non-empty str, got {tags!r}")
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or not tag.isprintable():
            raise TypeError(f"tags must be non-empty printable str, got {tag!r} in {tags!r}")
    return sorted(set(tags))
