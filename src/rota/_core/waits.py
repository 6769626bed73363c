"""A slot that waits for other tasks (``after=``): the engine's decision of a run whose
upstream conditions do not hold yet, and what an engine knows of an upstream's runs
(``docs/design.md``, "Dependencies between tasks").

:class:`Waits` is the part of :class:`~rota._core.engine.Engine` that decides it, for
every table alike: a claimed run whose conditions (:func:`~rota._core.deps.verdict`)
hold runs; one that waits is parked in the queue at the first of its deadline and its
task's next slot (a waiting run costs nothing per tick), and woken when an upstream's
run ends (:meth:`Waits.upstream_ended`); one that never will, or whose time ran out,
is skipped and counted (``skipped_by["upstream"]``). Where an upstream's runs are
read from is the table's: :meth:`Waits.record` (memory: :class:`Results` kept by the
engine; a store: its outcomes).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from .checks import BEFORE_MAX, grid, latest_slot
from .deps import Record, Upstream, cycle, cycle_text, upstreams, verdict
from .policy import Plan
from .task import Task, run_at
from .types import Result, Status, Time, slot_time
from .validate import LIMIT

KEPT = 4096
"""The most ended slots an engine keeps per upstream task (memory): a day of a
minutely task's, and more."""

ENDS = {Result.OK: "ok", Result.FAILED: "failed"}
"""How a run that is not retried ended, as a record says it."""


class Results:
    """What the engine keeps of one upstream task's runs: how each of its latest
    :data:`KEPT` slots ended, and when its latest ``ok`` run started. O(1) a run."""

    __slots__ = ("ends", "ok_started", "plan")

    def __init__(self) -> None:
        self.ends: OrderedDict[Time, str] = OrderedDict()
        self.ok_started: Time | None = None
        self.plan: Plan | None = None  # once it finished: its schedule's slots are known

    def add(self, slot: Time, result: str, started: Time) -> None:
        """The run of ``slot`` ended ``result`` (``"ok"``, ``"failed"``, ...)."""
        ends = self.ends
        ends[slot] = result
        ends.move_to_end(slot)
        if len(ends) > KEPT:
            ends.popitem(last=False)
        if result == "ok" and (self.ok_started is None or started > self.ok_started):
            self.ok_started = started


Ended = Callable[[Time, Time], tuple[Mapping[Time, str], Time | None]]
"""A store's read of how a task's slots in ``[low, high)`` ended, and when its latest
``ok`` run started (:meth:`rota.store.Store.ended`)."""


class TaskRecord:
    """A :class:`~rota._core.deps.Record` of one upstream task, from how its slots
    ended (``ends``, or read by ``fetch`` for the slots asked about: a store's), its
    plan (its schedule's slots), the slots it has yet to run (``pending``: its current
    run's and those queued ahead; from ``current`` on, every slot is to come) and
    whether it is finished (then a slot it did not end never will: ``"removed"``).
    Made for one decision; O(1) to make, plus a read per range asked of a store."""

    __slots__ = ("current", "ends", "fetch", "finished", "ok_started", "pending", "plan", "read")

    def __init__(
        self,
        ends: Mapping[Time, str],
        ok_started: Time | None,
        plan: Plan | None,
        current: Time | None,
        pending: Iterable[Time] = (),
        finished: bool = False,
        fetch: Ended | None = None,
    ) -> None:
        self.ends, self.ok_started, self.plan = ends, ok_started, plan
        self.current, self.pending, self.finished = current, set(pending), finished
        self.fetch, self.read = fetch, False

    def _load(self, low: float, high: float) -> None:
        """Read the ends of ``[low, high)`` (a store's record; once per range)."""
        if self.fetch is not None:
            ends, self.ok_started = self.fetch(low, high)
            self.ends, self.read = {**self.ends, **ends}, True

    def slots(self, low: float, high: float) -> list[float]:
        self._load(low, high)
        known = {*self.ends, *self.pending, *(() if self.current is None else [self.current])}
        found = None if self.plan is None else grid(self.plan, low, high, KEPT)
        if found is not None:  # its schedule's from its first on, and the extra it ran
            origin = self.plan.origin  # type: ignore[union-attr]
            known.update(slot for slot in found if origin is None or slot >= origin)
        return sorted(slot for slot in known if low <= slot < high)

    def latest_slot(self, at: float) -> float | None:
        found = None if self.plan is None else latest_slot(self.plan, at)
        if found is None:  # a schedule whose slots cannot be named: the runs it had
            self._load(at - BEFORE_MAX, math.nextafter(at, math.inf))
        origin = None if self.plan is None else self.plan.origin
        if found is not None and (origin is None or found >= origin):
            # its schedule's slot, unless one queued ahead of it is later (ended slots
            # off its schedule, triggered runs', are not slots: not scanned, O(1))
            known = [s for s in (*self.pending, self.current, found) if s is not None]
        else:
            if found is not None:  # before its first slot: a backfilled one, if it ran
                self._load(found, math.nextafter(found, math.inf))
            known = [s for s in (*self.ends, *self.pending, self.current) if s is not None]
        earlier = [slot for slot in known if slot <= at]
        return max(earlier) if earlier else None

    def result(self, slot: float) -> str | None:
        if slot in self.pending:  # (to run again, backfilled: its new end is the one)
            return None
        if self.fetch is not None and slot not in self.ends:
            self._load(slot, math.nextafter(slot, math.inf))
        ended = self.ends.get(slot)
        if ended is not None:
            return ended
        if self.finished:
            return "removed"
        if self.current is None or slot >= self.current:
            return None
        return "skipped"  # passed, with no run

    def latest_ok(self) -> float | None:
        if not self.read:
            self._load(0, 0)
        return self.ok_started


class Waits:
    """The engine's decisions of runs that wait for upstream tasks (a mixin of
    :class:`~rota._core.engine.Engine`, whose fields and decisions it uses)."""

    __slots__ = ()

    # The engine's fields (see Engine.__init__) and the decisions these defer to
    _tasks: dict[Hashable, Task]
    _dependants: dict[Hashable, set[Hashable]]
    _results: dict[Hashable, Results]
    queue: Any
    _following: Callable[..., Time | None]
    _skip_from: Callable[..., bool]
    _break: Callable[[Task, BaseException], None]
    status: Callable[[Hashable], Status | None]

    # -- the graph

    def edges(self) -> dict[Hashable, list[Hashable]]:
        """Every unfinished task's upstream ids (task -> the tasks it waits for), for
        the cycle check. O(tasks with ``after``)."""
        return {
            task_id: [u.task_id for u in task.plan.after]
            for task_id, task in self._tasks.items()
            if task.plan is not None and task.plan.after
        }

    def watch(self, task_id: Hashable, after: tuple[Upstream, ...] | None) -> None:
        """Index ``task_id`` under each of its upstreams (to be woken by their runs),
        and keep their results from now on. O(len(after))."""
        for upstream in after or ():
            self._dependants.setdefault(upstream.task_id, set()).add(task_id)
            if upstream.task_id not in self._results:
                self._results[upstream.task_id] = Results()

    def unwatch(self, task_id: Hashable, after: tuple[Upstream, ...] | None) -> None:
        """Take ``task_id`` out of its upstreams' index (it finished, or its ``after``
        changed); an upstream no task waits for any more is no longer kept."""
        for upstream in after or ():
            found = self._dependants.get(upstream.task_id)
            if found is not None:
                found.discard(task_id)
                if not found:
                    del self._dependants[upstream.task_id]
                    self._results.pop(upstream.task_id, None)

    def rewatch(self, task_id: Hashable, plan: Plan, found: Mapping[str, object]) -> None:
        """An update's ``after`` (and overlap) for a task: ``ValueError`` if it would
        have both ``after`` and several runs at once, before anything changes; else
        it is indexed under its new upstreams, and a run of it that waits is decided
        again. O(len(after))."""
        after = found.get("after", plan.after)
        if after and found.get("concurrent", plan.concurrent):
            raise one_at_a_time("after", task_id)
        if "after" in found:
            self.unwatch(task_id, plan.after)
            self.watch(task_id, after)  # type: ignore[arg-type]
            if plan.waiting:  # decided again at the next claim, under its new upstreams
                self.wake_one(task_id)
                if not after:
                    plan.waiting = None

    # -- what an upstream did

    def record(self, task_id: Hashable) -> Record | None:
        """What is known of task ``task_id``'s runs (memory: kept since a task first
        named it in ``after``); ``None`` if it was never scheduled (a slot waits).
        O(1) plus its queued runs."""
        task = self._tasks.get(task_id)
        kept = self._results.get(task_id) or Results()
        if task is None:
            if self.status(task_id) is None and not kept.ends:
                return None
            return TaskRecord(kept.ends, kept.ok_started, kept.plan, None, finished=True)
        return record_of(task, kept.ends, kept.ok_started)

    def gone(self, task_id: Hashable, plan: Plan | None) -> None:
        """Task ``task_id`` finished: it waits no more, and the runs that wait for its
        slots are decided again (those it will never run skip them)."""
        self.unwatch(task_id, None if plan is None else plan.after)
        kept = self._results.get(task_id)
        if kept is not None:
            kept.plan = plan
        self.wake(task_id)

    def upstream_ended(self, task_id: Hashable, slot: Time, result: str, started: Time) -> None:
        """A run of ``task_id`` (an upstream of some task) ended for good: keep how,
        and wake the runs that wait for it. O(its dependants)."""
        kept = self._results.get(task_id)
        if kept is not None:
            kept.add(slot, result, started)
        self.wake(task_id)

    def wake(self, task_id: Hashable) -> None:
        """Queue the waiting runs of ``task_id``'s dependants at their own time, so the
        next claim decides them again (the same ``tick``, or a runner's next wake-up).
        O(dependants log n)."""
        for dependant in list(self._dependants.get(task_id, ())):
            self.wake_one(dependant)

    def wake_one(self, task_id: Hashable) -> None:
        """Queue task ``task_id``'s run at its own time if it waits (to be decided
        again). O(log n)."""
        task = self._tasks.get(task_id)
        plan = None if task is None else task.plan
        if task is None or plan is None or not plan.waiting or plan.paused:
            return
        if task.status is not Status.SCHEDULED:
            return
        live = task.entry[1] != -1
        task.entry = self.queue.push(run_at(task), task_id, plan.priority)
        if live:
            self.queue.discard()  # the parked entry, after the change (as in update)

    # -- the claim's decision

    def _upstream_holds(self, task: Task, plan: Plan, now: Time) -> bool:
        """Whether a claimed run's upstream conditions hold: it runs. One that waits is
        parked until the first of its deadline and its task's next slot (or until an
        upstream's run ends: :meth:`wake`), queued at that time even when it is past,
        so the runs due before it are decided first (an upstream's among them); one
        that never holds, or whose time ran out, is skipped and counted
        (``upstream``), the run after it queued in its place. A trigger's run does
        not wait. A record that cannot be read fails the run with its error."""
        if plan.triggered:
            plan.triggered = False
            return True
        at, decided = run_at(task), task.entry[0]  # (decided: where the claim is, in time)
        slot = slot_time(0, None, at, plan.moved)
        window = (slot if plan.window is None else plan.window, slot)
        assert plan.after is not None
        try:
            found = verdict(plan.after, slot, window, self.record)
        except Exception as exc:
            exc.add_note(f"rota: the upstreams of task {task.entry[2]!r} could not be read")
            self._break(task, exc)
            return True
        if found.kind == "run":
            plan.waiting = None
            return True
        detail = found.skipped_for
        if found.kind == "wait":
            until = self._wait_until(task, plan, slot, now)
            if until is None or until > decided:  # decided again there, in time order
                plan.waiting = found.waiting
                plan.nominal = at  # its own time, while its entry says when to look again
                if until is None:  # (a store's row: due at the end of time, until woken)
                    task.entry = (LIMIT, -1, task.entry[2])
                else:
                    task.entry = self.queue.push(until, task.entry[2], plan.priority)
                return False
            detail = found.waiting[0]
        plan.waiting = None
        self._skip_from(task, plan, now, "upstream", lambda _: True)
        plan.last_skipped = (slot, "upstream", detail)
        return False

    def _wait_until(self, task: Task, plan: Plan, slot: Time, now: Time) -> Time | None:
        """When a waiting run's time runs out: its deadline, or its task's next slot
        (taken from the schedule into the backlog, where it waits its turn); ``None``
        if neither comes (an extra run, backfilled, meets no deadline and is no slot's
        stand-in: it waits until its upstreams end). Raises what the cursor raises."""
        if plan.extra_runs:
            return None
        limits = [] if plan.deadline is None else [slot + plan.deadline]
        if plan.backlog:
            limits.append(plan.backlog[0])
        elif plan.cursor is not None:
            window = plan.window
            try:
                nxt = self._following(plan, now, -LIMIT, slot)
            except Exception as exc:
                self._break(task, exc)
                return now
            plan.window = window  # (the next slot's window is this one's end: its default)
            if nxt is not None:
                plan.backlog = deque([nxt])
                limits.append(nxt)
        return min(limits) if limits else None


def one_at_a_time(option: str, task_id: Hashable) -> ValueError:
    """The error of an option (``after``, ``pool``) given to a task that runs several
    slots at once."""
    return ValueError(
        f"{option}= does not go with Overlap.allow(n) or Overlap.REPLACE (task {task_id!r}):"
        f" a task with {option}= runs its slots one at a time"
    )


def admitted_after(
    edges: Callable[[], dict[Hashable, list[Hashable]]], task_id: Hashable, after: object,
    plan: Plan,
) -> tuple[Upstream, ...] | None:  # fmt: skip
    """The upstream conditions ``after`` names for a new task (``None``: none), checked
    against its overlap policy and every other task's (``edges()``: a cycle is a
    ``ValueError`` naming it, :func:`check_after`). Raises ``TypeError`` for an
    ``after`` that names no upstreams."""
    found = upstreams(after)
    if not found:
        return None
    if plan.concurrent:
        raise one_at_a_time("after", task_id)
    check_after(edges(), task_id, found)
    return found


def record_of(
    task: Task, ends: Mapping[Time, str], ok_started: Time | None, fetch: Ended | None = None
) -> TaskRecord:
    """The record of an unfinished upstream ``task`` (live in memory, or restored from
    a store's row): its current slot and the slots queued ahead of it are to come,
    with those of its runs in flight. O(queued runs)."""
    plan = task.plan
    at = run_at(task)
    if plan is None:
        return TaskRecord(ends, ok_started, None, at, fetch=fetch)
    current = slot_time(plan.attempt, plan.first_at, at, plan.moved)
    pending = [*(plan.backlog or ()), *(plan.extras or ())]
    if plan.flying:
        pending += [slot_time(r.plan.attempt, r.plan.first_at, r.entry[0], r.plan.moved)
                    for r in plan.flying]  # fmt: skip
    if plan.extra_runs:  # its current run is an extra one: the schedule's is later
        current = max(pending, default=current)
        pending.append(slot_time(plan.attempt, plan.first_at, at, plan.moved))
    return TaskRecord(ends, ok_started, plan, current, pending, fetch=fetch)


def check_after(
    edges: Mapping[Hashable, Iterable[Hashable]], task_id: Hashable, after: tuple[Upstream, ...]
) -> None:
    """``ValueError`` naming the cycle if ``task_id`` waiting for ``after`` would close
    one over ``edges`` (every other task's upstreams). O(tasks + edges)."""
    found = cycle(edges, task_id, [u.task_id for u in after])
    if found is not None:
        raise ValueError(f"after would make a cycle: {cycle_text(found)}")
