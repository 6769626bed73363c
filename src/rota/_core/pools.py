"""Pools: a limit on the runs in flight at once, shared by the tasks given it.

``Pool("warehouse", 2)`` passed as ``pool=`` to the tasks that load a warehouse keeps
at most two of their runs in flight at once. A run due while its pool is full
waits (its status ``queued``, ``info().waiting_for`` the pool's
:attr:`Pool.waiting`), and the runs that waited start in slot order as places free
(``docs/operations.md``, "Tags and pools").

The decision is made twice, each once for every table of its kind:
:class:`Pools` is the engine's (memory: a claimed run takes a place or is parked
until a pooled run of its pool ends), and ``rota.store._pools`` the stores' (a
place is a lease on a pooled row, counted by the claim's transaction, so the limit
holds across every node on the store; a holder that dies keeps its place until its
lease is taken over).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from .policy import Plan
from .task import Task, run_at, waits_for_place
from .types import LEASED
from .validate import LIMIT
from .waits import one_at_a_time

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
"""What a pool's name may be: a metric label's value and a job file's key, as written."""


@dataclass(frozen=True, slots=True)
class Pool:
    """At most ``size`` runs of the tasks given this pool in flight at once.

    ``name`` (letters, digits, ``_.:-``, at most 64, starting with a letter or
    digit) says which pool: tasks given pools of one name share it, on every node
    of a store. ``size`` is an int >= 1; the size last stored for a name is the
    pool's. Raises ``TypeError`` for a name that is not a str or a size that is
    not an int, ``ValueError`` for a name or size out of those bounds.
    """

    name: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"Pool name must be a str, not {self.name!r}")
        if not NAME.fullmatch(self.name):
            raise ValueError(
                f"Pool name must be 1 to 64 letters, digits or _.:- (starting with a letter "
                f"or digit), not {self.name!r}"
            )
        if not isinstance(self.size, int) or isinstance(self.size, bool):
            raise TypeError(f"Pool size must be an int, not {self.size!r}")
        if self.size < 1:
            raise ValueError(f"Pool size must be at least 1, not {self.size!r}")

    @property
    def waiting(self) -> str:
        """What ``info().waiting_for`` shows of a run that waits for a place:
        ``"pool:<name>"``."""
        return f"pool:{self.name}"

    def to_json(self) -> dict[str, Any]:
        """The pool as a stored spec keeps it."""
        return {"name": self.name, "size": self.size}

    @staticmethod
    def from_json(found: Any) -> Pool:
        """The pool a spec stored (:meth:`to_json`): made once per name and size (every
        restored row of a pooled task asks)."""
        return _pool(found["name"], found["size"])


@functools.lru_cache(maxsize=256)
def _pool(name: str, size: int) -> Pool:
    return Pool(name, size)


def admitted_pool(task_id: Hashable, pool: object, plan: Plan) -> Pool | None:
    """``pool=`` for a new task, checked: a :class:`Pool` or ``None``. Raises
    ``TypeError`` naming the argument for anything else, ``ValueError`` for a task
    that runs several slots at once (``Overlap.allow(n)``, ``REPLACE``): each of its
    runs would need a place of its own."""
    if pool is None:
        return None
    if not isinstance(pool, Pool):
        raise TypeError(f"pool must be a rota.Pool or None, not {pool!r}")
    if plan.concurrent:
        raise one_at_a_time("pool", task_id)
    return pool


class Pools:
    """The engine's decision of pooled runs (a mixin of
    :class:`~rota._core.engine.Engine`, whose fields it uses): a claimed run takes a
    place in its pool, or is parked (out of the queue, until a pooled run of its
    pool ends) with its own time kept; an ended run wakes the pool's parked runs,
    queued at their own times, so the next claims decide them in slot order."""

    __slots__ = ()

    _tasks: dict[Hashable, Task]
    _places: dict[str, set[Hashable]]
    _parked: dict[str, set[Hashable]]
    queue: Any

    def pool_use(self) -> dict[str, tuple[int, int]]:
        """Each pool its tasks name: its size (as the last task scheduled in it gives
        it) and the places held (its runs claimed), by name. O(tasks)."""
        found: dict[str, tuple[int, int]] = {}
        for task in self._tasks.values():
            pool = None if task.plan is None else task.plan.pool
            if pool is not None:
                used = found.get(pool.name, (0, 0))[1]
                found[pool.name] = (pool.size, used + (task.status in LEASED))
        return dict(sorted(found.items()))

    def _take_place(self, task: Task, plan: Plan) -> bool:
        """Whether a claimed run of a pooled task may run: its pool has a place (taken
        now), else the run is parked and ``False``. The places held are checked
        against the tasks' statuses when the pool looks full, so a place whose run
        ended by any path (cancelled, replaced, failed) is never held for good.
        O(1); O(pool's size) when it looks full."""
        pool = plan.pool
        assert pool is not None
        task_id = task.entry[2]
        held = self._places.get(pool.name)
        if held is None:
            held = self._places[pool.name] = set()
        elif len(held) >= pool.size:
            held.difference_update([i for i in held if not self._holds(i)])
        if len(held) < pool.size:
            held.add(task_id)
            if plan.waiting is not None and plan.waiting == (pool.waiting,):
                plan.waiting = None
            return True
        plan.waiting = (pool.waiting,)
        if plan.nominal is None:  # its own time, while its entry is the end of time
            plan.nominal = run_at(task)
        plan.extra = True  # its next claim goes through the controls (its nominal time)
        task.entry = self.queue.push(LIMIT, task_id, plan.priority)
        self._parked.setdefault(pool.name, set()).add(task_id)
        return False

    def _holds(self, task_id: Hashable) -> bool:
        task = self._tasks.get(task_id)
        return task is not None and task.status in LEASED

    def _free_place(self, task: Task) -> None:
        """A run of pooled ``task`` ended (or the task did): its place is free, and the
        runs parked for its pool are queued again at their own times (a paused one
        when it is resumed). O(parked runs of the pool, log n each)."""
        name = task.plan.pool.name  # type: ignore[union-attr]
        held = self._places.get(name)
        if held is not None:
            held.discard(task.entry[2])
        parked = self._parked.get(name)
        if not parked:
            return
        for task_id in list(parked):
            if self._wake_parked(task_id):
                parked.discard(task_id)

    def _wake_parked(self, task_id: Hashable) -> bool:
        """Queue ``task_id``'s parked run at its own time (``False``: it is paused and
        stays parked); a task that no longer waits is let go. O(log n)."""
        task = self._tasks.get(task_id)
        if task is None or not waits_for_place(task):
            return True
        plan = task.plan
        assert plan is not None
        if plan.paused:
            return False
        plan.waiting = None
        live = task.entry[1] != -1
        task.entry = self.queue.push(run_at(task), task_id, plan.priority)
        if live:
            self.queue.discard()  # the parked entry, after the change (as in update)
        return True
