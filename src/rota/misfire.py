"""Misfire policies: what a recurring task does when it has fallen behind.

A task is *behind* when, as one of its runs comes up, a later slot of it is
due too: ``tick`` jumped past several slots, the process was suspended, a
run (or its retries) took longer than the period, or the task was paused.
All the slots due then (up to now) are its backlog; the policy says which of
them run. A run that is merely late (no later slot due yet) always runs. The
policy is applied when the late run is claimed, so it works the same under
``tick``, ``Runner`` and ``AsyncRunner``.

========================  =====================================================
``Misfire.CATCH_UP``      run every due slot, in order (the default, as
                          Java's ``scheduleAtFixedRate``)
``Misfire.bounded(k)``    run the latest ``k`` due slots, in order; skip the
                          earlier ones
``Misfire.COALESCE``      run once for the whole backlog: ``bounded(1)``, the
                          run's ``at`` being the latest due slot
``Misfire.SKIP``          run none of them: ``bounded(0)``, wait for the
                          first slot after now
========================  =====================================================

Skipped slots are never silent: the next run's :class:`~rota.RunOutcome`
says how many were skipped just before it (``outcome.skipped``), and runners'
stats count them. Cost: O(due slots) for a late run of a task with a bounded
policy; nothing otherwise.
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
