"""Value types shared by the engine, the scheduler and the runners."""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Callable, Hashable, Iterator, Mapping
from datetime import UTC, datetime, tzinfo
from enum import StrEnum
from typing import Any, NamedTuple, TypeAlias

Time: TypeAlias = int | float
"""A point in time or a duration, in whatever unit the clock uses."""

Action: TypeAlias = Callable[[Any], object]
"""What a task runs: called as ``action(at)``; raising an ``Exception`` fails the run."""


def epoch_shown(t: Time) -> str:
    """An epoch time as a log shows it: ISO 8601 UTC to the millisecond; a number
    ``datetime`` cannot show stays the number. O(1); raises nothing."""
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError, TypeError):
        return repr(t)


class Status(StrEnum):
    """Where a task is in its life.

    ``scheduled -> (queued ->) running -> done | failed | scheduled`` and
    ``cancelled`` from ``scheduled``, ``queued`` or ``running``. ``done``,
    ``failed`` and ``cancelled`` are final: the task is *finished*.
    """

    # Hash as the str it equals (Enum hashes its *name* in Python code): C-speed
    # lookups in the transition table, and consistent with ``== "scheduled"``.
    __hash__ = str.__hash__

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Result(StrEnum):
    """How one run ended: ``ok``, ``retry`` (failed, a retry is queued) or ``failed``.

    A store records one more, ``cancelled``: a ``failed`` run that a cancel ended
    (:func:`recorded_result`); read back, it is ``failed`` again (:func:`result_of`).
    """

    __hash__ = str.__hash__  # as for Status

    OK = "ok"
    RETRY = "retry"
    FAILED = "failed"


RECORDED = ("ok", "retry", "failed", "cancelled")
"""Every result a store records, logs, counts and shows: :class:`Result`'s, and
``cancelled``."""


SKIP_REASONS = ("misfire", "overlap", "deadline", "calendar")
"""Why a slot can be skipped: its misfire policy, its overlap policy, its deadline, its
calendar."""


class Skips(Mapping[str, int]):
    """Skipped slots by reason (:data:`SKIP_REASONS`), as ``RunOutcome.skipped_by``
    gives them: a read-only mapping, hashable like the outcome that holds it, equal
    to a dict with the same items. O(1) lookups."""

    __slots__ = ("_counts",)

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts = dict(counts or {})

    def __getitem__(self, reason: str) -> int:
        return self._counts[reason]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __hash__(self) -> int:
        return hash(frozenset(self._counts.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._counts == dict(other.items())

    def __repr__(self) -> str:
        return f"Skips({self._counts!r})"


NO_SKIPS = Skips()
"""``RunOutcome.skipped_by`` of a run with no skipped slot before it."""


class RunOutcome(NamedTuple):
    """The immutable record of one run of one task.

    ``at`` is the run's scheduled time (its slot, or its retry time);
    ``attempt`` is 0 for a slot's first run and r for its r-th retry;
    ``error`` is the exception the action raised, or ``None``; ``started``
    is the time the action started: the clock's reading under a runner, the
    ``now`` given to :meth:`Scheduler.tick` under ``tick``. ``started - at``
    is the run's lag. ``skipped`` is the number of a recurring task's slots
    skipped just before this run (always 0 under the defaults), and
    ``skipped_by`` the same count by reason (:data:`SKIP_REASONS`: ``misfire``,
    ``overlap``, ``deadline``), e.g. ``{"deadline": 2}``; empty when none was.
    ``value`` is what the action returned (for an ``async def`` action, what it
    returned when awaited), or ``None``. At ``at`` a run of a jittered task has
    its slot; ``jitter`` is the offset it was meant to start after (0 for a task
    without jitter, and for retries, which run unjittered), so its :attr:`lag`,
    ``started - at - jitter``, is how late it started against the time it was
    due, not the jitter it was given.

    On an epoch clock (``time.time``), :meth:`at_datetime` and
    :meth:`started_datetime` give the times as aware datetimes.
    """

    task_id: Hashable
    at: Time
    result: Result
    error: BaseException | None
    attempt: int
    started: Time
    skipped: int = 0
    value: object = None
    skipped_by: Skips = NO_SKIPS
    jitter: Time = 0

    def skips(self) -> Skips:
        """``skipped_by``, or for an outcome made without it (by hand, or read back from
        a store, which keeps the count only) its count as ``misfire``'s. O(1)."""
        if self.skipped and not self.skipped_by:
            return Skips({"misfire": self.skipped})
        return self.skipped_by

    @property
    def lag(self) -> Time:
        """``started - at - jitter``: how late the run started against the time it
        was due (``started - at`` for a task without jitter). O(1)."""
        return self.started - self.at - self.jitter

    def at_datetime(self, tz: tzinfo = UTC) -> datetime:
        """``at`` as an aware datetime in ``tz``, for a scheduler on an epoch clock. O(1)."""
        return datetime.fromtimestamp(self.at, tz)

    def started_datetime(self, tz: tzinfo = UTC) -> datetime:
        """``started`` as an aware datetime in ``tz``, for a scheduler on an epoch clock. O(1)."""
        return datetime.fromtimestamp(self.started, tz)


class RunCancelled(Exception):  # noqa: N818 - it names what happened to the run
    """The error of a run that was stopped because its task was cancelled while it
    ran: an ``async def`` action under :class:`~rota.AsyncRunner` (its coroutine
    is cancelled), a command under ``rota run`` (its process group is ended).

    The run is reported ``failed``, as a cancelled task's failing run always
    is, but logged at INFO as ``cancelled`` (nobody is alerted: someone asked
    for it), and a durable store's history records it as ``cancelled``.
    """


_OWN_ERROR = re.compile(r"rota(?:\.\w+)+: ")
"""The type of one of rota's own errors as ``traceback`` names it: a private path
(``rota.cli._command.CommandError: ``), which says nothing its message does not."""


def error_shown(text: str | None) -> str | None:
    """A run's recorded error as people read it: the one rendering of ``history``,
    ``check``, the API, the pages and what stores record (:func:`error_text`).

    rota's own errors (a command's exit status, a cancel, a lost lease) are their
    message alone; Python's and the user's keep their type (``ValueError: bad
    input``, ``myapp.errors.Upstream: 503``); an empty output block is left out
    (rows recorded before said ``output:`` with nothing after it). Idempotent.
    O(len(text))."""
    if text is None:
        return None
    text = text.strip()
    own = _OWN_ERROR.match(text)
    if own is not None:
        text = text[own.end() :]
    if text.endswith("\noutput:"):
        text = text[: -len("\noutput:")].rstrip()
    return text


def error_text(error: BaseException) -> str:
    """What is recorded of a run's ``error``: :func:`error_shown` of its
    ``traceback.format_exception_only`` (its type, message and notes). O(len)."""
    return error_shown("".join(traceback.format_exception_only(error))) or type(error).__name__


class GivenBack(Exception):  # noqa: N818 - it names what happens to the run
    """Raised by an action its own node stopped before it finished (a graceful
    shutdown that ran out of grace: ``rota run`` terminating a command).

    A durable scheduler gives such a run back instead of recording it: nothing is
    recorded, the row is released as it was claimed (same slot, same attempt, so
    the same idempotency key), and another node, or this one after its restart,
    runs it again. The run is reported as ``retry`` with this error (the runners
    log no line of their own for it: the durable scheduler says it was given
    back). In memory it is an error like any other. Exported by
    :mod:`rota.durable`.
    """


def recorded_result(result: Result, error: BaseException | None) -> str:
    """The result a run is recorded, logged, counted and shown with (one of
    :data:`RECORDED`): ``cancelled`` for a run that a cancel ended (``error`` a
    :class:`RunCancelled`), else its own ``result``. The one rule every store, log
    line, metric and page follows. O(1)."""
    return "cancelled" if isinstance(error, RunCancelled) else str(result)


def result_of(recorded: str) -> Result:
    """The :class:`Result` of a recorded result (one of :data:`RECORDED`): a
    ``cancelled`` run was ``failed``, as the runners reported it. Raises
    ``ValueError`` for text no version of rota records. O(1)."""
    return Result.FAILED if recorded == "cancelled" else Result(recorded)


FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})
"""The final statuses: a task in one is *finished* (the one definition; stores and the
command use it, the SQL stores through :func:`sql_set`)."""
UNFINISHED = frozenset({Status.SCHEDULED, Status.QUEUED, Status.RUNNING})
"""The statuses of a task that may still run."""
LEASED = frozenset({Status.QUEUED, Status.RUNNING})
"""The statuses of a stored task whose run is claimed: it holds a lease."""
CLAIMED = Status.RUNNING
"""The status a store writes when it claims a run, and when it takes over an
expired lease: a stored run is ``running`` from its claim (a runner that claims
ahead of its workers shows its own waiting claims ``queued``, see
:meth:`rota.Scheduler.status`). Allowed by the engine's transition table from
``scheduled`` and from both leased statuses (a test checks each store's SQL)."""
RELEASED = Status.SCHEDULED
"""The status a store writes when a claimed, unstarted run is given back."""


def sql_set(statuses: frozenset[Status]) -> str:
    """The statuses as a SQL list literal, sorted: ``('cancelled', 'done', 'failed')``."""
    return "(" + ", ".join(f"'{s}'" for s in sorted(statuses)) + ")"


class TaskInfo(NamedTuple):
    """What :meth:`rota.Scheduler.info` knows about one task.

    ``next_run_time`` is the time of its next run while it is ``scheduled``
    and not paused (``None`` while a run is queued or running, while paused,
    and once finished); ``schedule`` is the schedule it runs on (``None``
    once finished); ``attempt`` the retries used by its current slot;
    ``last_outcome`` its most recent :class:`RunOutcome` while it is
    unfinished (``None`` before its first run, and once it finished: only
    the final status of finished tasks is kept; keep outcomes with a
    listener or ``on_outcome``); ``last_skipped`` the latest slot it
    skipped, ``(slot, reason, detail)``, or ``None``.

    A snapshot taken under the scheduler's lock, O(1) to build.
    """

    task_id: Hashable
    status: Status
    paused: bool
    next_run_time: Time | None
    schedule: object
    attempt: int
    last_outcome: RunOutcome | None
    last_skipped: tuple[Time, str, str | None] | None = None
    """The latest slot it skipped, as ``(slot, reason, detail)``: ``reason`` one of
    ``skipped_by``'s (``"misfire"``, ``"overlap"``, ``"deadline"``, ``"calendar"``,
    ``"upstream"``); ``detail`` the calendar's reason (``"weekend"``,
    ``"holiday"``, ``"window"``) for a slot its calendar skipped or merged into
    another run, the upstream key that never held (``"import@<slot>"``) for an
    upstream's, else ``None``; or ``None`` if it skipped none. Decided when the
    slot is (a calendar's: when the run after it is)."""
    waiting_for: tuple[str, ...] = ()
    """What its current run waits for (``after=``): upstream keys
    ``"<task>@<slot>"``, or an upstream's id (a freshness condition, or one not
    scheduled yet); empty when it does not wait."""


VALUE_CHARS = 4000
"""The most characters of a run's value kept in its stored outcome."""


def value_text(value: object) -> str:
    """A run's value (not ``None``) as it is kept and shown, the one rule for memory
    and every store: a str as it is, else JSON (or its ``repr`` if JSON cannot carry
    it), cut at :data:`VALUE_CHARS`. O(size of the value)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def slot_time(attempt: int, first_at: Time | None, at: Time, moved: Time | None = None) -> Time:
    """The slot a run belongs to, the time of its idempotency key
    (``f"{task_id}@{slot!r}"``): while the slot is retried (``attempt`` > 0), the
    slot its first attempt had, ``first_at``; else the slot its calendar moved it
    from (``moved``), or the run's own, unjittered time ``at``. The one rule for the
    engine's tasks and runs, a run's context and a stored row. O(1)."""
    if attempt and first_at is not None:
        return first_at
    return at if moved is None else moved


class StoreError(RuntimeError):
    """The store cannot be used as it is: a newer schema, an unreadable row (a stored
    spec of a kind this version does not know), a bad URL. (Public as
    :class:`rota.store.StoreError`.)"""
