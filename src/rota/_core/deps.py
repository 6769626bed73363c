"""Dependencies between tasks: the upstream condition a slot waits for, as a value,
and the graph question asked of every task's conditions (``docs/design.md``,
"Dependencies between tasks").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)

WITHIN = ("slot", "window")
"""The words ``Upstream(within=...)`` takes (else a ``timedelta``: freshness)."""


class Upstream:
    """A condition on another task's runs that a slot waits for.

    ``within="slot"`` (the default): the upstream's latest slot at or before this
    slot's time ended ``ok``; ``"window"``: every upstream slot inside this run's
    window ``[window_start, window_end)`` ended ``ok``; a ``timedelta``: the
    upstream's latest ``ok`` run started no earlier than this slot minus that much.
    Immutable, equal when built from equal arguments, stored as data
    (:meth:`to_json`).

    Raises ``TypeError`` for an unhashable ``task_id`` or a ``within`` that is not
    a str or a ``timedelta``; ``ValueError`` for another word, or a ``timedelta``
    that is not positive. O(1).
    """

    __slots__ = ("task_id", "within")

    task_id: Hashable
    within: str | float  # a word, or seconds (freshness)

    def __init__(self, task_id: Hashable, within: str | timedelta = "slot") -> None:
        try:
            hash(task_id)
        except TypeError:
            raise TypeError(f"task_id must be hashable, got {task_id!r}") from None
        if isinstance(within, timedelta):
            seconds = within.total_seconds()
            if seconds <= 0:
                raise ValueError(f"within must be a positive timedelta, got {within!r}")
            value: str | float = seconds
        elif isinstance(within, str):
            if within not in WITHIN:
                raise ValueError(f"within must be 'slot', 'window' or a timedelta, got {within!r}")
            value = within
        else:
            raise TypeError(f"within must be 'slot', 'window' or a timedelta, got {within!r}")
        object.__setattr__(self, "task_id", task_id)
        object.__setattr__(self, "within", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("an Upstream is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Upstream) and (self.task_id, self.within) == (
            other.task_id,
            other.within,
        )

    def __hash__(self) -> int:
        return hash((self.task_id, self.within))

    def __repr__(self) -> str:
        within = (
            repr(self.within)
            if isinstance(self.within, str)
            else f"timedelta(seconds={self.within!r})"
        )
        return f"Upstream({self.task_id!r}, within={within})"

    def to_json(self) -> list[Any]:
        """``[task_id, within]`` (``within``: the word, or seconds). O(1)."""
        return [self.task_id, self.within]

    @classmethod
    def from_json(cls, value: list[Any]) -> Upstream:
        """The condition :meth:`to_json` wrote (equal to it)."""
        task_id, within = value
        if isinstance(within, str):
            return cls(task_id, within)
        return cls(task_id, timedelta(seconds=within))


def upstreams(after: object) -> tuple[Upstream, ...]:
    """What ``after=`` names, as conditions: a task id (``Upstream(task_id)``), an
    :class:`Upstream`, or a list or tuple of them (all must hold); ``None`` or an
    empty list for none. A task named twice is refused, as is anything else.

    Raises ``TypeError`` for another type, ``ValueError`` for an upstream named
    twice. O(len(after))."""
    if after is None:
        return ()
    given = list(after) if isinstance(after, list | tuple) else [after]
    found: list[Upstream] = []
    for item in given:
        if isinstance(item, Upstream):
            found.append(item)
        elif isinstance(item, str | int) and not isinstance(item, bool):
            found.append(Upstream(item))
        else:
            raise TypeError(
                f"after must be a task id, an Upstream or a list of them, got {item!r}"
            )
    ids = [u.task_id for u in found]
    twice = sorted({repr(i) for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"after names {', '.join(twice)} more than once")
    return tuple(found)


def cycle(edges: Mapping[K, Iterable[K]], task_id: K, new: Iterable[K]) -> list[K] | None:
    """The cycle that giving ``task_id`` the upstreams ``new`` would close, given every
    other task's upstreams ``edges`` (task -> the tasks it waits for; ``task_id``'s
    own entry is replaced by ``new``): the path ``[task_id, ..., task_id]``, or
    ``None``. Depth-first from ``new``, each task visited once: O(tasks + edges)."""
    parent: dict[K, K] = {}
    stack = [(up, task_id) for up in new]
    while stack:
        node, came_from = stack.pop()
        if node in parent:
            continue
        parent[node] = came_from
        if node == task_id:
            path = [task_id]
            step = came_from
            while step != task_id:
                path.append(step)
                step = parent[step]
            path.append(task_id)
            path.reverse()
            return path
        stack.extend((up, node) for up in edges.get(node, ()))
    return None


def downstream_of(edges: Mapping[K, Iterable[K]], task_id: K) -> list[K]:
    """``task_id`` and every task that waits for it at any depth (``edges``: task ->
    the tasks it waits for), each after all of its upstreams among them (a
    topological order; the graph has no cycle). O(tasks + edges)."""
    below: dict[K, list[K]] = {}
    for task, ups in edges.items():
        for up in ups:
            below.setdefault(up, []).append(task)
    reached, stack = {task_id}, [task_id]
    while stack:
        for task in below.get(stack.pop(), ()):
            if task not in reached:
                reached.add(task)
                stack.append(task)
    waiting = {t: sum(1 for up in edges.get(t, ()) if up in reached) for t in reached}
    order, ready = [], [task_id]
    while ready:
        task = ready.pop()
        order.append(task)
        for nxt in below.get(task, ()):
            waiting[nxt] -= 1
            if not waiting[nxt]:
                ready.append(nxt)
    return order


def cycle_text(path: Sequence[Hashable]) -> str:
    """A cycle for people: ``'a' -> 'b' -> 'a'``."""
    return " -> ".join(repr(step) for step in path)


class Record(Protocol):
    """What a table knows of an upstream task, for :func:`verdict` (memory: the
    engine's record of recent results; a store: its outcomes, one indexed read)."""

    def slots(self, low: float, high: float) -> list[float]:
        """The task's schedule's slots in ``[low, high)``, ascending."""
        ...

    def latest_slot(self, at: float) -> float | None:
        """Its schedule's latest slot at or before ``at``, ``None`` if none."""
        ...

    def result(self, slot: float) -> str | None:
        """How its run of ``slot`` ended for good: ``"ok"``, ``"failed"``,
        ``"cancelled"``, ``"skipped"``; ``None`` while it has not (not yet run, or
        retried)."""
        ...

    def latest_ok(self) -> float | None:
        """When its latest ``ok`` run started, ``None`` if none did."""
        ...


class Verdict(NamedTuple):
    """What a slot's upstream conditions say now: ``"run"``; ``"wait"`` with what it
    waits for (``waiting``: ``"<task>@<slot>"`` keys, or a task id for freshness or
    an upstream not scheduled yet); ``"skip"`` with the key that will never hold."""

    kind: str
    waiting: tuple[str, ...] = ()
    skipped_for: str | None = None


RUN = Verdict("run")


def verdict(
    conditions: Iterable[Upstream],
    slot: float,
    window: tuple[float, float],
    record: Callable[[Hashable], Record | None],
) -> Verdict:
    """Whether a slot at ``slot`` covering ``window`` (``[start, end)``) may run under
    ``conditions``, read from each upstream's ``record`` (``None``: not scheduled yet:
    it waits). All must hold: the first that never will skips the slot; else those
    that do not hold yet make it wait. The one rule of every table. O(upstream slots
    in the window)."""
    waiting: list[str] = []
    for condition in conditions:
        key = str(condition.task_id)
        seen = record(condition.task_id)
        if seen is None:
            waiting.append(key)
            continue
        within = condition.within
        if not isinstance(within, str):  # freshness: waits, never skips
            started = seen.latest_ok()
            if started is None or started < slot - within:
                waiting.append(key)
            continue
        if within == "slot":
            latest = seen.latest_slot(slot)
            wanted = [] if latest is None else [latest]
            if latest is None:
                waiting.append(key)
        else:
            wanted = seen.slots(*window)
        for upstream_slot in wanted:
            result = seen.result(upstream_slot)
            slot_key = f"{key}@{upstream_slot!r}"
            if result is None:
                waiting.append(slot_key)
            elif result != "ok":
                return Verdict("skip", (), slot_key)
    return Verdict("wait", tuple(waiting)) if waiting else RUN
