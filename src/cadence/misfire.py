"""Misfire policies: what a recurring task does about slots it missed.

A slot is *missed* when its time has already passed (it is before now) when
the task comes to queue it: ``tick`` jumped past several slots, the process
was suspended, a run (or its retries) took longer than the period, or the
task was paused. A slot due exactly now is not missed. The policy is
applied each time the task queues its next slot, on resume, and when a task
is scheduled with a first slot in the past.

========================  =====================================================
``Misfire.CATCH_UP``      run every missed slot, in order (the default, as
                          Java's ``scheduleAtFixedRate``)
``Misfire.bounded(k)``    run the latest ``k`` missed slots, in order; skip
                          the earlier ones
``Misfire.COALESCE``      run once for all missed slots: ``bounded(1)``, the
                          run's ``at`` being the latest missed slot
``Misfire.SKIP``          run none of them: ``bounded(0)``, jump to the first
                          slot at or after now
========================  =====================================================

Skipped slots are never silent: the next run's :class:`~cadence.RunOutcome`
says how many were skipped just before it (``outcome.skipped``), and runners'
stats count them. Cost: O(missed slots) when slots were missed, nothing
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Misfire:
    """A misfire policy: ``limit`` is the most missed slots run; ``None`` runs them all.

    Use the constants and :meth:`bounded` rather than the constructor.
    Raises ``TypeError``/``ValueError`` for a ``limit`` that is not ``None``
    or an int >= 0.
    """

    limit: int | None

    CATCH_UP: ClassVar[Misfire]
    COALESCE: ClassVar[Misfire]
    SKIP: ClassVar[Misfire]

    def __post_init__(self) -> None:
        if self.limit is not None:
            if not isinstance(self.limit, int) or isinstance(self.limit, bool):
                raise TypeError(f"limit must be an int or None, got {self.limit!r}")
            if self.limit < 0:
                raise ValueError(f"limit must be >= 0, got {self.limit!r}")

    @classmethod
    def bounded(cls, k: int) -> Misfire:
        """Catch up at most ``k`` missed slots (the latest ones); skip the rest."""
        if not isinstance(k, int) or isinstance(k, bool):
            raise TypeError(f"k must be an int, got {k!r}")
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k!r}")
        return cls(k)

    def __repr__(self) -> str:
        names = {None: "CATCH_UP", 0: "SKIP", 1: "COALESCE"}
        name = names.get(self.limit)
        return f"Misfire.{name}" if name else f"Misfire.bounded({self.limit})"


Misfire.CATCH_UP = Misfire(None)
Misfire.COALESCE = Misfire(1)
Misfire.SKIP = Misfire(0)

__all__ = ["Misfire"]
