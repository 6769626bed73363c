"""How an action is called: its call shape, checked when it is scheduled.

By default an action is called as ``action(at)`` (the contract). With
``args=``/``kwargs=`` it is called as ``action(*args, **kwargs)`` instead, so
existing functions need no wrapper. Either way, an action that declares a
keyword-only parameter named ``run`` also gets the run's facts in it, as a
:class:`RunContext` (task id, time, slot, attempt, idempotency key).

The shape is checked against the action's signature when the task is
scheduled, so ``def report():`` scheduled without ``args=()`` is a
``TypeError`` at once, not hours later. The check of a plain function is
cached per code object: scheduling the same function again costs one dict
lookup.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import CodeType, FunctionType
from typing import Any, NamedTuple

from .types import Action, Time, slot_time

SHAPES: dict[int, tuple[CodeType, bool]] = {}
"""Plain functions whose ``action(at)`` call binds: ``id(code) -> (code, wants run)``.

Keyed by the code object's id, not the code object: CPython recomputes a code
object's hash on every lookup (~1,500 instructions), an int's is free. The code
is kept in the value, so its id cannot be reused while it is cached. Bound
methods are not cached (their ``self`` shifts the binding)."""
_SHAPES_MAX = 4096
"""Cached code objects at most (programs that compile code at run time stay bounded)."""


class RunContext(NamedTuple):
    """The facts of one run, for an action that declares a keyword-only ``run`` parameter.

    ``at`` is this run's time (its slot, or its retry time); ``slot`` the time
    of the slot it belongs to (the same for every retry of that slot);
    ``attempt`` is 0 for a slot's first run and r for its r-th retry;
    ``key`` is ``"<task_id>@<slot>"``: the same for every attempt of a slot,
    so effects written with it can be deduplicated. Under a durable store,
    ``fence`` is the run's fencing token (it grows with every claim of the
    task, so a write carrying a lower one is from a holder that lost its
    lease) and ``expiries`` the number of leases of this slot that expired
    before (crashed or stalled holders: ``> 0`` means the run may have
    started before); both are 0 in memory. ``window_start`` is where the interval
    of time the run covers begins (``docs/policies.md``, "The window a run
    covers"); it ends at :attr:`window_end`, the slot.

    Built, O(1), only for the runs of actions that declare ``run``.
    """

    task_id: Hashable
    at: Time
    slot: Time
    attempt: int
    fence: int = 0
    expiries: int = 0
    window_start: Time | None = None

    @property
    def key(self) -> str:
        """The slot's idempotency key, ``f"{task_id}@{slot!r}"``. O(1)."""
        return f"{self.task_id}@{self.slot!r}"

    @property
    def window_end(self) -> Time:
        """Where the interval of time the run covers ends: its slot. O(1)."""
        return self.slot


class Bound:
    """An action with its arguments and call shape, callable as ``bound(at)``.

    Made at scheduling time when the action needs more than ``action(at)``.
    ``task_id`` and ``plan`` (the task's plan, ``None`` for a plain one-off)
    are set by the scheduler (:meth:`bind`) before the task is added: a run's
    facts are read from them when the action asked for them with a
    keyword-only ``run`` parameter.
    """

    __slots__ = (
        "action",
        "args",
        "expiries",
        "fence",
        "kwargs",
        "pass_at",
        "plan",
        "task_id",
        "wants_run",
    )

    def __init__(
        self,
        action: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        pass_at: bool,
        wants_run: bool,
    ) -> None:
        self.action = action
        self.args = args
        self.kwargs = kwargs
        self.pass_at = pass_at
        self.wants_run = wants_run
        self.task_id: Hashable = None
        self.plan: Any = None
        self.fence = 0  # the lease's, under a durable store
        self.expiries = 0

    def bind(self, task_id: Hashable, plan: Any) -> None:
        """Say which task this call belongs to (its id and plan), for its runs' facts."""
        self.task_id = task_id
        self.plan = plan

    def for_run(self, plan: Any) -> Bound:
        """This call bound to one run of a concurrent task (its own ``plan``: attempt,
        slot), for the facts that run's action is given. O(1)."""
        if not self.wants_run:
            return self
        bound = Bound(self.action, self.args, self.kwargs, pass_at=self.pass_at, wants_run=True)
        bound.bind(self.task_id, plan)
        bound.fence, bound.expiries = self.fence, self.expiries
        return bound

    def __repr__(self) -> str:
        return f"<{self.action!r} args={self.args!r} kwargs={self.kwargs!r}>"

    def __call__(self, at: Time) -> Any:
        args = (at, *self.args) if self.pass_at else self.args
        if not self.wants_run:
            return self.action(*args, **self.kwargs)
        plan = self.plan
        if plan is None:
            run = RunContext(self.task_id, at, at, 0, self.fence, self.expiries, at)
        else:
            attempt = plan.attempt
            slot = slot_time(attempt, plan.first_at, at, plan.moved)
            start = slot if plan.window is None else plan.window
            run = RunContext(self.task_id, at, slot, attempt, self.fence, self.expiries, start)
        return self.action(*args, **self.kwargs, run=run)


def _signature(action: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(action)
    except (TypeError, ValueError):  # no signature (some builtins): trust the caller
        return None


def _wants_run(signature: inspect.Signature | None) -> bool:
    if signature is None:
        return False
    run = signature.parameters.get("run")
    return run is not None and run.kind is inspect.Parameter.KEYWORD_ONLY


def _bind(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    if signature is None:
        return
    extra = {"run": None} if _wants_run(signature) else {}
    signature.bind(*args, **kwargs, **extra)


def prepare(action: Action, args: Any, kwargs: Any) -> Action:
    """The callable a task stores for ``action``: itself, or a :class:`Bound`.

    Raises ``TypeError`` when ``args`` is not a list or tuple, ``kwargs`` not
    a mapping with str keys, or the action cannot be called with them (or,
    without them, as ``action(at)``), naming the action and its signature.
    O(1) for a plain function called as ``action(at)`` (cached); otherwise
    one signature inspection (microseconds).
    """
    if args is None and kwargs is None:
        code = action.__code__ if type(action) is FunctionType else None
        cached = SHAPES.get(id(code)) if code is not None else None
        wants = cached[1] if cached is not None and cached[0] is code else None
        if wants is None:
            signature = _signature(action)
            try:
                _bind(signature, (0,), {})
            except TypeError:
                raise TypeError(
                    f"action {action!r} cannot be called as action(at) (its signature is "
                    f"{signature}); pass args=/kwargs= for the arguments it takes, e.g. args=()"
                ) from None
            wants = _wants_run(signature)
            if code is not None:
                if len(SHAPES) >= _SHAPES_MAX:
                    SHAPES.clear()
                SHAPES[id(code)] = (code, wants)
        return Bound(action, (), {}, pass_at=True, wants_run=True) if wants else action
    args = () if args is None else args
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(args, list | tuple):
        raise TypeError(f"args must be a list or tuple, got {args!r} ({type(args).__name__})")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(f"kwargs must be a mapping with str keys, got {kwargs!r}")
    if "run" in kwargs:
        raise TypeError("kwargs must not hold 'run': it is given to actions that declare it")
    signature = _signature(action)
    try:
        _bind(signature, args, kwargs)
    except TypeError as exc:
        raise TypeError(
            f"action {action!r} cannot be called with args={args!r}, kwargs={dict(kwargs)!r}: "
            f"{exc} (its signature is {signature})"
        ) from None
    return Bound(action, tuple(args), dict(kwargs), pass_at=False, wants_run=_wants_run(signature))
