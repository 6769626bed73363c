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
==========================  ===================================================

A slot "falls due while the run is in flight" when its time is after the
run started and no later than when it ended. Slots already due before the
run started are the misfire policy's: they were missed, not overlapped. The
policy is applied where the run completes, by the engine, so it is the same
under ``tick``, ``Runner``, ``AsyncRunner`` and every store (under ``tick`` a
run takes no time, so nothing ever overlaps).

Kubernetes calls these ``concurrencyPolicy: Forbid`` (SKIP, which also does
not queue the slot), Temporal ``BUFFER_ALL`` (BUFFER under catch-up) and
``SKIP``. Running several runs of one task at once, or stopping the run in
flight for the new slot, is not offered: see ``docs/policies.md``, "Overlap".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

MODES = ("buffer", "skip")
"""The overlap policies by name, as the job file spells them."""


@dataclass(frozen=True, slots=True)
class Overlap:
    """An overlap policy; use the constants (or :meth:`named`), not the constructor.

    Raises ``ValueError`` for a ``mode`` that is not one of :data:`MODES`.
    """

    mode: str

    BUFFER: ClassVar[Overlap]
    SKIP: ClassVar[Overlap]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"overlap must be one of {', '.join(MODES)}, got {self.mode!r}")

    @classmethod
    def named(cls, name: object) -> Overlap:
        """The policy a job file names (``"buffer"``, ``"skip"``). O(1).

        Raises ``TypeError`` for a non-str and ``ValueError`` for an unknown name.
        """
        if not isinstance(name, str):
            raise TypeError(f"overlap must be a str ({' | '.join(MODES)}), got {name!r}")
        return cls(name)

    def __repr__(self) -> str:
        return f"Overlap.{self.mode.upper()}"


Overlap.BUFFER = Overlap("buffer")
Overlap.SKIP = Overlap("skip")

__all__ = ["Overlap"]
