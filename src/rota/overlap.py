"""Overlap policies: what a recurring task does with a slot that falls due while its
previous run is still in flight.

==========================  ===================================================
``Overlap.BUFFER``          the slot waits for the run in flight to end, then
                            meets the task's misfire policy (the default: a
                            task never overlaps itself, and no slot is lost
                            unless the misfire policy says so)
``Overlap.SKIP``            the slot is skipped and counted (``skipped_by
                            ["overlap"]`` on the next outcome), and the task
                            goes on with its first slot after the run ended
``Overlap.allow(n)``        up to ``n`` runs of the task in flight at once,
                            each with its own slot, key and retries (under a
                            runner with an executor, or ``AsyncRunner``); a
                            slot due while ``n`` are in flight waits
``Overlap.REPLACE``         the run in flight is stopped (its coroutine
                            cancelled: ``RunCancelled``, not retried) and the
                            slot runs once it has stopped; only for actions
                            that can be stopped (``async def``)
==========================  ===================================================

A slot "falls due while the run is in flight" when its time is after the
run started and no later than when it ended. Slots already due before the
run started are the misfire policy's: they were missed, not overlapped. The
policies are decided by the engine, so they are the same under ``tick``,
``Runner`` and ``AsyncRunner`` (under ``tick`` a run takes no time, so
nothing ever overlaps). In durable mode a task's runs in flight are all on
the node that holds its lease, which starts each under it; another node takes
them over (and runs them again, same keys) if that one dies
(``docs/design.md``).

Kubernetes calls these ``concurrencyPolicy: Forbid`` (SKIP), ``Allow``
(``allow(n)``) and ``Replace``; Temporal ``BUFFER_ALL`` (BUFFER under
catch-up), ``SKIP``, ``ALLOW_ALL`` and ``CANCEL_OTHER`` (REPLACE: the new run
starts once the old one completed its cancellation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

MODES = ("buffer", "skip", "replace")
"""The overlap policies by name, as the job file spells them (and ``{ allow = N }``)."""


@dataclass(frozen=True, slots=True)
class Overlap:
    """An overlap policy; use the constants, :meth:`allow` or :meth:`named`, not the
    constructor. ``limit`` is the most runs of the task in flight at once.

    Raises ``ValueError`` for a ``mode`` that is not one of :data:`MODES` or
    ``"allow"``, and a ``limit`` that does not fit it.
    """

    mode: str
    limit: int = 1

    BUFFER: ClassVar[Overlap]
    SKIP: ClassVar[Overlap]
    REPLACE: ClassVar[Overlap]

    def __post_init__(self) -> None:
        if self.mode not in (*MODES, "allow"):
            raise ValueError(
                f"overlap must be one of {', '.join(MODES)} or allow(n), got {self.mode!r}"
            )
        if (self.mode == "allow") != (self.limit > 1) or self.limit < 1:
            raise ValueError(f"overlap {self.mode!r} cannot have limit {self.limit!r}")

    @classmethod
    def allow(cls, n: int) -> Overlap:
        """Up to ``n`` runs of the task in flight at once (``allow(1)`` is
        :attr:`BUFFER`). O(1). Raises ``TypeError`` for a non-int, ``ValueError``
        for ``n < 1``."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"n must be an int, got {n!r} ({type(n).__name__})")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n!r}")
        return cls.BUFFER if n == 1 else cls("allow", n)

    @classmethod
    def named(cls, name: object) -> Overlap:
        """The policy a job file names (``"buffer"``, ``"skip"``, ``"replace"``). O(1).

        Raises ``TypeError`` for a non-str and ``ValueError`` for an unknown name.
        """
        if not isinstance(name, str):
            raise TypeError(f"overlap must be a str ({' | '.join(MODES)}), got {name!r}")
        return cls(name)

    @property
    def concurrent(self) -> bool:
        """Whether a run may start while another of the task is in flight (``allow(n)``)
        or stop it (``REPLACE``): the policies whose runs are objects of their own."""
        return self.mode in ("allow", "replace")

    def __repr__(self) -> str:
        if self.mode == "allow":
            return f"Overlap.allow({self.limit})"
        return f"Overlap.{self.mode.upper()}"


Overlap.BUFFER = Overlap("buffer")
Overlap.SKIP = Overlap("skip")
Overlap.REPLACE = Overlap("replace")

__all__ = ["Overlap"]
