"""A task's plan as JSON: its spec (the options it was scheduled with, as a store
keeps them beside its action and arguments) and its state (what its runs have done so
far), each written and read here, beside the plan's fields, and nowhere else.

:func:`plan_spec` and :func:`plan_from_json` are the two ways of the spec;
:func:`plan_state` and :func:`plan_from_json` the two ways of the state. A field the
plan gains (a control, a calendar) is stored by adding it here; a store's rows
(:mod:`rota.durable._rows`) only carry the two dicts. Policies are stored as data
(:mod:`rota._core.codec`), never pickled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from . import codec
from .checks import OVERLAP_ATTRIBUTES, overlap_of, set_overlap
from .controls import WINDOWS, _new_run
from .deps import Record, Upstream
from .engine import Engine
from .moves import calendar_spec, plain
from .policy import Plan, RetryPolicy, Schedule
from .pools import Pool
from .task import SCHEDULED, Run, Task, _Waiting, run_slot, run_state
from .types import FINISHED, UNFINISHED, Status, Time

CONTROLS = frozenset({"overlap", "deadline", "jitter", "end", "max_runs", "after", "pool"})
"""The spec keys of the scheduling controls, stored only when set (rows written
before them, or by tasks that use none, have none)."""
CONTROL_STATE = frozenset(
    {
        "runs",
        "nominal",
        "moved",
        "last_skipped",
        "extra_runs",
        "extras",
        "ahead",
        "waiting",
        "triggered",
        "skips",
        "pending",
        "windows",
        "flying",
    }
)
"""The state keys the controls keep, stored only when set."""

Policies = tuple[Schedule, RetryPolicy, codec.StoredTypes | None, bool]
"""A stored spec's schedule, retry policy and ``retry_on``, and whether it sets a
scheduling control (:data:`CONTROLS`)."""


def policies_of(spec: dict[str, Any]) -> Policies:
    """The policies a stored spec names, decoded (shared objects: policies are
    immutable). Raises what decoding raises (:class:`~rota.store.StoreError` for a
    kind this version does not know)."""
    return (
        codec.calendared_from(codec.schedule_from(spec["schedule"]), spec.get("calendar")),
        codec.retry_from(spec["retry"]),
        codec.retry_on_from(spec["retry_on"]),
        bool(CONTROLS.intersection(spec)),
    )


def plan_spec(plan: Plan, retry: RetryPolicy | None, backoff: Time) -> dict[str, Any]:
    """The spec of a plan just made (``retry``/``backoff``: the scheduler's default
    retry policy, stored for a plan that brings none). The controls are stored only
    when set, so rows of tasks that use none stay as they were. Raises ``TypeError``
    for a schedule, retry policy or ``retry_on`` a store cannot keep. O(1)."""
    spec: dict[str, Any] = {
        "schedule": codec.schedule_spec(plain(plan.schedule)),
        "max_retries": plan.max_retries,
        "retry": codec.retry_spec(plan.retry or retry, backoff),
        "retry_on": codec.retry_on_spec(plan.retry_on),
        "misfire": plan.misfire,
    }
    for key, value in (
        ("calendar", calendar_spec(plan.schedule)),
        ("overlap", codec.overlap_spec(overlap_of(plan))), ("deadline", plan.deadline),
        ("jitter", plan.jitter), ("end", plan.end), ("max_runs", plan.max_runs),
        ("after", None if not plan.after else [u.to_json() for u in plan.after]),
        ("pool", None if plan.pool is None else plan.pool.to_json()),
    ):  # fmt: skip
        if value is not None:
            spec[key] = value
    return spec


def spec_changes(found: dict[str, object]) -> dict[str, Any]:
    """Plan attributes (what :func:`rota._core.checks.changes` gives, or what a plan
    holds of them) as the spec fragment that stores them; ``priority`` included (a
    store keeps it in a column of its own). Raises ``TypeError`` for a retry policy
    or ``retry_on`` a store cannot keep. O(len(found))."""
    fragment: dict[str, Any] = {}
    for name, value in found.items():
        if name == "overlap_skip":  # the policy, from it and OVERLAP_ATTRIBUTES
            probe = Plan()
            probe.overlap_skip = bool(value)
            for attribute in OVERLAP_ATTRIBUTES:
                if attribute in found:
                    setattr(probe, attribute, found[attribute])
            fragment["overlap"] = codec.overlap_spec(overlap_of(probe))
        elif name in OVERLAP_ATTRIBUTES:
            continue
        elif name == "retry":
            fragment["retry"] = codec.retry_spec(value, 1)  # type: ignore[arg-type]
        elif name == "retry_on":
            fragment["retry_on"] = codec.retry_on_spec(value)
        elif name == "after":
            fragment["after"] = None if not value else [u.to_json() for u in value]  # type: ignore[attr-defined]
        elif name == "schedule":  # under another calendar (or none)
            fragment["schedule"] = codec.schedule_spec(plain(value))
            fragment["calendar"] = calendar_spec(value)
        else:
            fragment[name] = value
    return fragment


def applied_spec(spec: dict[str, Any], pending: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """``spec`` with the changes that waited for a run in flight (``pending``, as the
    state stored them) as ``plan`` holds them now that they apply (a new dict: specs
    are replaced, never changed in place). O(len(pending))."""
    applied = spec_changes({name: getattr(plan, name) for name in _attributes(pending)})
    return {**spec, **{k: v for k, v in applied.items() if k != "priority"}}


def plan_state(plan: Plan) -> dict[str, Any]:
    """A plan's run state: cursor position, retries, backlog, skips (and, for a task
    with scheduling controls, what they keep, each only when set). O(1), plus the
    runs in flight of a concurrent task."""
    cursor = plan.cursor
    state: dict[str, Any] = {
        "cursor": None if cursor is None else [cursor.state()],  # type: ignore[attr-defined]
        "slot": plan.slot,
        "first_at": plan.first_at,
        "attempt": plan.attempt,
        "last_delay": plan.last_delay,
        "backlog": None if not plan.backlog else list(plan.backlog),
        "skipped": plan.skipped,
        "rescheduled": plan.rescheduled,
    }
    if plan.window is not None:  # (rows written before windows were kept have none)
        state["window"] = plan.window
    if plan.extra or plan.skips:
        for key, value in (
            ("runs", plan.runs), ("nominal", plan.nominal), ("moved", plan.moved),
            ("last_skipped", None if plan.last_skipped is None else list(plan.last_skipped)),
            ("extra_runs", plan.extra_runs),
            ("extras", plan.extras), ("skips", plan.skips),
            ("ahead", None if not plan.ahead else [[at, w] for at, w in plan.ahead.items()]),
            ("windows", None if not plan.windows else [list(w) for w in plan.windows]),
            ("pending", None if not plan.pending else spec_changes(plan.pending)),
            ("flying", None if not plan.flying else [run_state(r) for r in plan.flying]),
            ("held", plan.held), ("ended", None if plan.ended is None else str(plan.ended)),
            ("waiting", None if not plan.waiting else list(plan.waiting)),
            ("triggered", plan.triggered),
        ):  # fmt: skip
            if value:
                state[key] = value
    return state


BASE_STATE = len(plan_state(Plan()))
"""How many keys the state of a task without controls has: every stored state has
them, and only a state with more can hold a control's."""


def plan_from_json(
    spec: dict[str, Any],
    state: dict[str, Any],
    policies: Policies,
    priority: int,
    paused: bool,
) -> Plan:
    """The plan a spec and a state describe (``policies``: the spec's, decoded by
    :func:`policies_of` or a cache of it), with its ``priority`` and ``paused`` flag
    (a store keeps them in columns of their own). O(1), plus the backlog."""
    schedule, retry, retry_on, controlled = policies
    stored = state["cursor"]
    cursor = None if stored is None else schedule.resume(stored[0])  # type: ignore[attr-defined]
    plan = Plan(cursor, spec["max_retries"], retry, spec["misfire"], priority)
    plan.retry_on = retry_on
    plan.schedule = schedule
    plan.paused = paused
    plan.backlog = deque(state["backlog"]) if state["backlog"] else None
    plan.attempt = state["attempt"]
    plan.skipped = state["skipped"]
    plan.last_delay = state["last_delay"]
    plan.rescheduled = state["rescheduled"]
    plan.slot = state["slot"]
    plan.first_at = state["first_at"]
    plan.window = state.get("window")
    plan.origin = spec.get("origin")
    kept = len(state) - ("window" in state)  # (the window is not a control's)
    if controlled or (kept > BASE_STATE and CONTROL_STATE.intersection(state)):
        _controls(plan, spec, state)
    elif paused:
        plan.extra = True  # (a misfire policy sets it when the plan is made)
    return plan


def _controls(plan: Plan, spec: dict[str, Any], state: dict[str, Any]) -> None:
    """Set a plan's scheduling controls from its spec and state."""
    _apply_spec(plan, spec)
    plan.runs = state.get("runs", 0)
    plan.nominal = state.get("nominal")
    plan.moved = state.get("moved")
    skipped = state.get("last_skipped")
    plan.last_skipped = None if skipped is None else tuple(skipped)
    plan.extra_runs = state.get("extra_runs", 0)
    plan.extras = state.get("extras")
    plan.skips = state.get("skips")
    ahead = state.get("ahead")
    plan.ahead = None if not ahead else dict(ahead)
    windows = state.get("windows")
    if windows:
        plan.windows = deque(((start, end) for start, end in windows), maxlen=WINDOWS)
    pending = state.get("pending")
    if pending:
        probe = Plan()
        _apply_spec(probe, pending)
        plan.pending = {name: getattr(probe, name) for name in _attributes(pending)}
    plan.held = state.get("held", False)
    waiting = state.get("waiting")
    plan.waiting = None if not waiting else tuple(waiting)
    plan.triggered = state.get("triggered", False)
    ended = state.get("ended")
    plan.ended = None if ended is None else Status(ended)
    plan.extra = plan.uses_controls()


def _apply_spec(plan: Plan, spec: dict[str, Any]) -> None:
    """Set the plan attributes a spec (or a spec fragment) names."""
    for key, value in spec.items():
        if key == "overlap":
            set_overlap(plan, codec.overlap_from(value))
        elif key == "max_retries":
            plan.max_retries = value
        elif key == "retry":
            plan.retry = codec.retry_from(value)
        elif key == "retry_on":
            plan.retry_on = codec.retry_on_from(value)
        elif key in ("misfire", "deadline", "jitter", "end", "max_runs", "priority"):
            setattr(plan, key, value)
        elif key == "after":
            plan.after = None if not value else tuple(Upstream.from_json(u) for u in value)
        elif key == "pool":
            plan.pool = None if value is None else Pool.from_json(value)
        elif key == "schedule" and "calendar" in spec:  # a change of calendar, waiting
            plan.schedule = codec.calendared_from(codec.schedule_from(value), spec["calendar"])


_ATTRIBUTES = {"overlap": ("overlap_skip", *OVERLAP_ATTRIBUTES), "calendar": ()}


def _attributes(spec: dict[str, Any]) -> list[str]:
    """The plan attributes a spec fragment sets."""
    return [name for key in spec for name in _ATTRIBUTES.get(key, (key,))]


class StoredEngine(Engine):
    """The engine of one stored task: a store rebuilds the task from its row, adopts it
    here (:meth:`adopt`, :meth:`adopt_runs`), applies the very operation the in-memory
    scheduler applies (``claim``, ``complete``, ``cancel``, ...) and stores what the
    task became. A claim whose misfire policy moved the run returns (a store claims
    that run later, in its order with other tasks' runs). What only storage needs is
    here; :class:`~rota._core.engine.Engine` has none of it."""

    __slots__ = ("reader",)

    follow_moves = False
    reader: Callable[[Hashable], Record | None]

    def record(self, task_id: Hashable) -> Record | None:
        """What the store knows of upstream ``task_id`` (:attr:`reader`, set by the
        store's table: its row and outcomes), for a slot's ``after`` conditions."""
        reader = getattr(self, "reader", None)
        return None if reader is None else reader(task_id)

    def reset(self) -> None:
        """Forget every task, as a new engine with these settings knows none: a store's
        engine of one task serves the next claim, instead of a new engine (eight
        objects for the cyclic collector to track) being built for each. O(tasks)."""
        self._tasks.clear()
        self._history.clear()
        self._strays.clear()
        self.queue.clear()
        self._waiting = 0
        self._places.clear()
        self._parked.clear()
        if self.stops:  # (a list take_stops handed out is the caller's)
            self.stops = []

    def adopt(self, task: Task, at: Time) -> None:
        """Take in a task rebuilt from storage, in its status, its run at ``at``. O(log n).

        How a durable store reuses the engine's decisions: it rebuilds one
        task (action, status, plan) from a stored row, adopts it into an
        engine of its own, applies the same operation as in memory
        (:meth:`claim`, :meth:`complete`, :meth:`cancel`, ...) and stores
        what the task became. A ``scheduled`` task is queued (parked if
        paused); a ``queued`` or ``running`` one is a claim held by its
        driver; a finished one is only completed (reported), as a run of a
        task cancelled meanwhile is.
        """
        plan = task.plan
        if task.status is SCHEDULED and not task.parked:
            task.entry = self.queue.push(at, task.entry[2], 0 if plan is None else plan.priority)
        else:
            task.entry = (at, -1, task.entry[2])
        if task.status in UNFINISHED:
            self._tasks[task.entry[2]] = task

    def adopt_runs(self, task: Task, runs: list[list[Any]], *, again: bool = False) -> None:
        """Take in the runs of an adopted concurrent ``task`` from their stored states
        (:func:`run_state`), then queue its next run as its state says. With
        ``again`` (its holder's lease expired, or it gave a run back), a run that was
        in flight is due again at its own time, as it was claimed (its attempt is not
        counted): at-least-once, same slot and key. O(len(runs) log n).
        """
        plan = task.plan
        assert plan is not None
        plan.flying = []
        alive = task.status not in FINISHED
        for stored in runs:
            slot, at, status, attempt, first_at, last_delay, replaced, skipped, skips = stored[:9]
            run = _new_run(task, plan, False, counted=False)
            own = run.plan
            assert own is not None
            own.window = stored[9] if len(stored) > 9 else None  # (older rows: none kept)
            own.moved = slot if slot != at and not attempt else None
            own.attempt, own.first_at, own.last_delay = attempt, first_at, last_delay
            own.skipped, own.skips = skipped, skips
            run.replaced = replaced
            waiting = status == Status.SCHEDULED or again
            if (waiting and not alive) or (again and replaced):
                continue  # never to run: a finished task's retry, a run REPLACE stopped
            plan.flying.append(run)
            plan.inflight += 1
            run.entry = (at, -1, task.entry[2])
            if waiting:
                run.status = Status.SCHEDULED
                key = _Waiting()
                self._tasks[key] = run
                self._waiting += 1
                run.entry = self.queue.push(at, key, own.priority)
            else:  # claimed: whether a worker started it yet, its completion is a run's
                run.status = Status.RUNNING
        if again and plan.held:  # the runs it waited for to stop are gone with their node
            plan.held = any(run.status is not Status.SCHEDULED for run in plan.flying)
        if alive:
            self._sync(task, plan)

    def run_of(self, task: Task, slot: Time) -> Run | None:
        """The run of concurrent ``task`` in flight for ``slot`` (:func:`run_slot`), or
        ``None``. O(runs in flight)."""
        plan = task.plan
        for run in () if plan is None or plan.flying is None else plan.flying:
            if run_slot(run) == slot and run.status is not Status.SCHEDULED:
                assert isinstance(run, Run)
                return run
        return None
