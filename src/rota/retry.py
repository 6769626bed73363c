"""Retry policies: how long a failed run waits before it is retried.

A task retries a failed run up to its ``max_retries`` times; the policy
chooses each delay (or refuses to retry). The retry runs at the failed run's
time plus the delay. The default, ``Backoff(backoff)``, is the contract's
``backoff * 2 ** (r - 1)`` for retry r. Give a policy per task
(``schedule_once(..., retry=...)``) or per scheduler
(``Scheduler(retry=...)``).

Jitter spreads the retries of many tasks that failed together (against the
same dependency, at the same moment), so they do not retry in lockstep. The
three kinds are those of the AWS Architecture Blog's "Exponential Backoff
And Jitter", with ``d = min(cap, base * 2 ** (r - 1))``:

* ``"full"``: uniform in ``[0, d]``;
* ``"equal"``: ``d / 2`` plus uniform in ``[0, d / 2]``;
* ``"decorrelated"``: uniform in ``[base, previous * 3]``, capped at ``cap``
  (``previous`` being this slot's previous delay, ``base`` at first).

Random draws come from an injected ``random.Random``: seed it and tests stay
deterministic.
"""

from __future__ import annotations

import random
from typing import Literal

from rota._core import validate as _validate
from rota._core.policy import RetryPolicy, doubling
from rota._core.types import Time

Jitter = Literal["full", "equal", "decorrelated"]
JITTERS = ("full", "equal", "decorrelated")


class Backoff:
    """Exponential backoff: ``base * 2 ** (r - 1)`` for retry r, capped and jittered.

    ``cap`` (> 0) bounds every delay; ``jitter`` is ``None``, ``"full"``,
    ``"equal"`` or ``"decorrelated"``; ``rng`` is the random source for
    jitter (a fresh ``random.Random()`` by default; pass a seeded one in
    tests). Without jitter and with int ``base`` and ``cap``, delays are
    ints. O(1) per retry.

    Raises ``TypeError`` for a non-number ``base``/``cap`` or an ``rng`` that
    is not a ``random.Random``; ``ValueError`` for a ``base`` or ``cap`` that
    is not > 0 and finite, or an unknown ``jitter``.
    """

    __slots__ = ("base", "cap", "jitter", "rng")

    def __init__(
        self,
        base: Time = 1,
        *,
        cap: Time | None = None,
        jitter: Jitter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.base = _validate.positive("base", base)
        self.cap = None if cap is None else _validate.positive("cap", cap)
        if jitter is not None and jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {JITTERS} or None, got {jitter!r}")
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {rng!r}")
        self.jitter = jitter
        self.rng = rng if rng is not None else random.Random()

    def __repr__(self) -> str:
        return f"Backoff({self.base!r}, cap={self.cap!r}, jitter={self.jitter!r})"

    def delay(self, retry: int, previous: Time | None) -> Time:
        """The delay before retry number ``retry`` (1-based) of a slot. O(log retry).

        Past float range the delay is ``cap`` (or infinite without one, which
        fails the task: a retry that never comes is no retry).
        """
        cap = self.cap
        if self.jitter == "decorrelated":
            high = 3 * (self.base if previous is None else previous)
            drawn = self.rng.uniform(self.base, high)
            return drawn if cap is None else min(cap, drawn)
        delay = doubling(self.base, retry)
        if cap is not None and delay > cap:
            delay = cap
        if self.jitter == "full":
            return self.rng.uniform(0, delay)
        if self.jitter == "equal":
            return delay / 2 + self.rng.uniform(0, delay / 2)
        return delay


class NoRetry:
    """Never retry: a failed run fails at once, whatever ``max_retries`` says."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NoRetry()"

    def delay(self, retry: int, previous: Time | None) -> None:
        """Always ``None``: do not retry."""
        return


__all__ = ["Backoff", "Jitter", "NoRetry", "RetryPolicy"]
