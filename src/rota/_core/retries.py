"""A failed run's retry: whether it is retried, when, and its queueing (a mixin of
:class:`~rota._core.engine.Engine`, whose fields it uses): the one decision of every
table, in memory and on every store."""

from __future__ import annotations

from collections.abc import Callable

from .controls import _apply
from .policy import Plan, RetryPolicy, doubling
from .task import Task
from .types import Time
from .validate import time_from


class Retries:
    """The engine's retry decisions (``retry``: the scheduler's default policy; ``None``
    is the contract's ``backoff * 2 ** (r - 1)``)."""

    __slots__ = ()

    _backoff: Time
    _retry: RetryPolicy | None
    _requeue: Callable[[Task, Time], None]

    def _queue_retry(
        self, task: Task, plan: Plan, attempt: int, retry: tuple[Time, Time], at: Time
    ) -> None:
        """Queue the retry ``(time, delay)`` decided for the failed run at ``at``."""
        if not attempt:
            plan.first_at = at if plan.moved is None else plan.moved  # its key's slot
        plan.attempt = attempt + 1
        plan.last_delay = retry[1]
        if plan.extra:
            plan.nominal = None  # a retry runs at its own time, unjittered
            if plan.pending:
                _apply(plan, plan.pending)
        self._requeue(task, retry[0])

    def _retry_of(self, plan: Plan, at: Time, error: BaseException) -> tuple[Time, Time] | None:
        """The retry of a failed run at ``at`` as ``(time, delay)``, or ``None``: no retry.

        Only an ``Exception`` is retried, while the slot has retries left,
        and not by a run whose task was rescheduled meanwhile (the new
        schedule takes over). Changes nothing; raises what the retry policy
        raises, or ``TypeError``/``ValueError`` for a retry time that is not
        a finite number.
        """
        attempt = plan.attempt
        if attempt >= plan.max_retries or not isinstance(error, Exception) or plan.rescheduled:
            return None
        retry_on = plan.retry_on
        if retry_on is not None and not (
            isinstance(error, retry_on) if isinstance(retry_on, type | tuple) else retry_on(error)
        ):
            return None
        delay = self._retry_delay(plan, attempt)
        if delay is None:
            return None
        return time_from("retry: the failed run's time + the delay", at + delay), delay

    def _retry_delay(self, plan: Plan, attempt: int) -> Time | None:
        """The delay before retry ``attempt + 1``, by the task's or the default policy.

        Raises ``TypeError``/``ValueError`` for a policy's delay that is not a
        finite number >= 0 (or ``None``); past float range, the default backoff's
        delay is infinite (then the retry's time is refused).
        """
        policy = plan.retry or self._retry
        if policy is None:  # the contract's: Backoff(backoff)'s rule
            return doubling(self._backoff, attempt + 1)
        delay = policy.delay(attempt + 1, plan.last_delay)
        if delay is None:
            return None
        if time_from(f"{policy!r}.delay()", delay) < 0:
            raise ValueError(f"{policy!r}.delay() returned {delay!r}, a negative delay")
        return delay
