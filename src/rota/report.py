"""What people and scripts are shown about stored tasks: one rule for the command
(``rota status``, ``history``, ``check``, the live view) and the dashboard.

The JSON shapes here are pinned by ``cli.md`` (``status --json``, ``history
--json``) and served unchanged by the web API; the times follow one rule (see
:func:`job_zone`): a job's times are shown in its zone, with the offset.
Everything here is pure and cheap: no I/O, no clock but :func:`local_zone`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rota import TaskInfo, Upcoming
from rota._core.types import error_shown
from rota.calendars import AnyOf, BusinessDay, Calendared
from rota.schedules import FixedDelay, FixedRate, Once, Schedule

if TYPE_CHECKING:  # the command's plan needs neither
    from rota.durable import Entry
    from rota.store import AuditRow, OutcomeRow


def local_zone() -> tzinfo:
    """This machine's zone (the default for cron and for printed times). O(1)."""
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


def job_zone(name: str | None, override: tzinfo | None = None) -> tzinfo:
    """The zone a job's times are shown in, the one rule for human output: ``override``
    (``--tz``) if given, else the job's zone (its ``tz`` or ``[defaults] tz``, stored
    with it), else this machine's. A stored name this machine does not know (no
    tzdata): this machine's zone. Never raises. O(1) after the zone's first load."""
    if override is not None:
        return override
    if name is not None:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return local_zone()


def time_shown(at: float | None, tz: tzinfo) -> str:
    """A time for people: ISO 8601 in ``tz`` with its offset, milliseconds if not
    whole seconds; ``-`` for ``None``. O(1)."""
    if at is None:
        return "-"
    spec = "seconds" if at == int(at) else "milliseconds"
    return datetime.fromtimestamp(at, tz).isoformat(timespec=spec)


UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def relative(at: float | None, now: float) -> str:
    """A time for people at a glance, from ``now``: ``in 4 s``, ``3 min ago``, ``in 2 h``,
    ``5 d ago``, ``now`` within a second; ``-`` for ``None``. Pages show it with the
    absolute time (:func:`time_shown`) on hover. O(1)."""
    if at is None:
        return "-"
    delta = at - now
    size = abs(delta)
    if size < 1:
        return "now"
    unit, seconds = next(u for u in UNITS if size >= u[1])
    count = int(size // seconds)
    return f"in {count} {unit}" if delta > 0 else f"{count} {unit} ago"


def printable(text: str) -> str:
    """A job id as shown in one-line output: control characters escaped. O(len)."""
    return text if text.isprintable() else text.encode("unicode_escape").decode()


def first_line(text: str | None, empty: str = "") -> str:
    """The first line of a stored error (``exit status 3: ...``), ``empty`` if none. O(len)."""
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else empty


def ran_at(last: OutcomeRow) -> float:
    """When a recorded run ran: when it started (its slot if it never did). O(1)."""
    return last.at if last.started is None else last.started


def status_entry(entry: Entry) -> dict[str, Any]:
    """One task as ``rota status --json`` and ``GET /api/jobs`` show it: the pinned
    ``id``, ``status``, ``paused``, ``next``, then ``last`` (result), ``last_at``
    (its run's slot), ``last_started`` (when it ran), ``unreadable``, ``zone``,
    ``waiting_for`` and ``tags``.
    O(1)."""
    info, latest, unreadable, zone_name = entry.info, entry.last, entry.unreadable, entry.zone
    return {
        "id": info.task_id,
        "status": str(info.status),
        "paused": info.paused,
        "next": info.next_run_time,
        "last": latest.result if latest else None,
        "last_at": latest.at if latest else None,
        "last_started": ran_at(latest) if latest else None,
        "unreadable": unreadable,
        "zone": zone_name,
        "waiting_for": list(info.waiting_for),
        "tags": list(entry.tags),
    }


def history_entry(o: OutcomeRow) -> dict[str, Any]:
    """One recorded run as ``rota history --json`` and ``GET /api/jobs/{id}/history``
    show it: ``at``, ``result``, ``attempt``, ``error``, ``started``, then ``slot``,
    ``finished``, ``skipped`` (and ``skipped_by``: the same by reason), ``owner``,
    ``output``. O(1)."""
    return {
        "at": o.at, "result": o.result, "attempt": o.attempt, "error": error_shown(o.error),
        "started": o.started, "slot": o.slot, "finished": o.finished,
        "skipped": o.skipped, "skipped_by": dict(o.skips()), "owner": o.owner,
        "output": o.value,
    }  # fmt: skip


def audit_entry(row: AuditRow) -> dict[str, Any]:
    """One control action as ``rota audit --json`` and ``GET /api/audit`` show it:
    ``at``, ``who``, ``action``, ``job``, ``note``, ``applied``. O(1)."""
    return {"at": row.at, "who": row.who, "action": row.action, "job": row.job,
            "note": row.note, "applied": row.applied}  # fmt: skip


def decided(scheduler: Any, task_id: object) -> list[Upcoming]:
    """The slots a task's next run stands for, from the first its decision took on
    (excluded ones too) up to its own: :meth:`~rota.Scheduler.upcoming`, asked for
    more until it reaches that run (at most 1,000). O(slots listed)."""
    n = 8
    while True:
        listed: list[Upcoming] = scheduler.upcoming(task_id, n)
        runs = [u for u in listed if u.at is not None]
        if n >= 1000 or len(listed) < n or (runs and listed[-1].slot >= runs[0].slot):
            return listed
        n = min(1000, n * 4)


def moved_from(listed: list[Upcoming], at: float | None) -> tuple[float, str] | None:
    """The slot (and why) that the run at ``at`` was moved from, when its calendar moved
    it; ``None`` when it runs at its own slot. ``listed``: :func:`decided`. O(listed)."""
    own = [u for u in listed if u.at is not None and u.at == at]
    if not own or own[-1].slot == at or own[-1].reason is None:
        return None
    return own[-1].slot, own[-1].reason


MOVES_SHOWN = {
    "skip": "excluded slots skipped",
    "next": "moved to the next allowed time",
    "previous": "moved to the previous allowed time",
}
"""What a task on a calendar does with an excluded slot, in words."""


def described(schedule: Schedule | None, tz: tzinfo) -> str:
    """A schedule in words, for people: ``every 1h 30m``, ``cron 0 3 * * * (Europe/Berlin)``,
    ``once, at 2026-12-01T03:00:00+01:00``. O(1)."""
    if schedule is None:
        return "-"
    if isinstance(schedule, Once):
        return "once" if schedule.at is None else f"once, at {time_shown(schedule.at, tz)}"
    if isinstance(schedule, FixedRate):
        return f"every {_period(schedule.period)}"
    if isinstance(schedule, FixedDelay):
        return f"every {_period(schedule.delay)} after the previous run ends"
    if isinstance(schedule, AnyOf):
        return "any of: " + "; ".join(described(member, tz) for member in schedule.schedules)
    if isinstance(schedule, Calendared):
        moves = MOVES_SHOWN[schedule.on_excluded]
        calendar = schedule.calendar.name
        return f"{described(schedule.schedule, tz)}, on calendar {calendar} ({moves})"
    if isinstance(schedule, BusinessDay):
        n = schedule.n
        which = {1: "first", -1: "last"}.get(n) or (
            _ordinal(n) if n > 0 else f"{_ordinal(-n)} from last"
        )
        return (
            f"{which} business day of each month at {schedule.at.strftime('%H:%M')} "
            f"({schedule.calendar.name}, {schedule.calendar.tz})"
        )
    expression = getattr(schedule, "expression", None)  # a Cron (rota.cron needs cronsim)
    if isinstance(expression, str):
        return f"cron {expression} ({getattr(schedule, 'zone', 'UTC')})"
    return repr(schedule)


def duration_shown(seconds: float) -> str:
    """A duration as a job file spells it: ``1h30m``, ``90s``, ``1d``; ``500ms`` below
    a second. O(1)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts, left = [], seconds
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if left >= size:
            parts.append(f"{int(left // size)}{unit}")
            left -= (left // size) * size
    if left:
        parts.append(f"{left:g}s")
    return "".join(parts)


def after_shown(after: Iterable[Any]) -> str:
    """A job's upstream conditions for people: ``import``, ``import (window)``,
    ``rates (within 1h)``; comma-separated. O(len(after))."""
    shown = []
    for upstream in after:
        within = upstream.within
        if within == "slot":
            shown.append(str(upstream.task_id))
        elif within == "window":
            shown.append(f"{upstream.task_id} (window)")
        else:
            shown.append(f"{upstream.task_id} (within {duration_shown(within)})")
    return ", ".join(shown)


def waiting_shown(keys: list[str] | tuple[str, ...], tz: tzinfo) -> str:
    """What a waiting run waits for, for people: ``waiting (import@2026-12-04 05:00)``
    (each upstream slot in ``tz``; a freshness condition, or an upstream not scheduled
    yet, by its id). O(len(keys))."""
    shown = []
    for key in keys:
        task, at, slot = key.rpartition("@")
        try:
            local = datetime.fromtimestamp(float(slot), tz)
        except (ValueError, OverflowError, OSError):
            shown.append(key)
            continue
        spec = "%Y-%m-%d %H:%M" if not local.second else "%Y-%m-%d %H:%M:%S"
        shown.append(f"{task}{at}{local.strftime(spec)}")
    return f"waiting ({', '.join(shown)})"


def day_shown(at: float, tz: tzinfo) -> str:
    """A slot for people, with its weekday: ``Sat 2026-12-26 09:00`` (seconds when it
    has them). O(1)."""
    local = datetime.fromtimestamp(at, tz)
    return local.strftime("%a %Y-%m-%d %H:%M" if not local.second else "%a %Y-%m-%d %H:%M:%S")


def excluded_shown(when: object, slot: float, reason: str) -> str:
    """Why a calendar excluded ``slot``, for people: ``weekend``, ``holiday``, or the
    window, ``window 22:00-06:00`` (a period: ``window 2026-12-20 00:00-2027-01-04
    00:00``), in the calendar's zone. ``when`` is the job's schedule (a
    :class:`~rota.calendars.Calendared`). O(windows)."""
    calendar = getattr(when, "calendar", None)
    if reason != "window" or calendar is None:
        return reason
    window = calendar.window_at(slot)
    if window is None:
        return reason
    if window.daily:
        return f"window {window.start:%H:%M}-{window.end:%H:%M}"
    return f"window {window.start:%Y-%m-%d %H:%M}-{window.end:%Y-%m-%d %H:%M}"


def _ordinal(k: int) -> str:
    """``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _period(seconds: float) -> str:
    """``5400`` -> ``1h 30m``; a fraction of a second as seconds with decimals."""
    if seconds != int(seconds) or seconds < 1:
        return f"{seconds:g}s"
    left, parts = timedelta(seconds=seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(int(left.total_seconds()), size)
        if count:
            parts.append(f"{count}{unit}")
        left = timedelta(seconds=rest)
    return " ".join(parts)


GRACE = 60.0
"""Seconds past its time before a job counts as overdue, at least (``check``)."""


def grace(schedule: object, due: float) -> float:
    """How late a run due at ``due`` may be before its job is overdue (no node runs it):
    :data:`GRACE`, or one period of its ``schedule`` if longer. O(1)."""
    period = getattr(schedule, "period", None)
    if period is None and schedule is not None and hasattr(schedule, "start"):
        try:
            cursor = schedule.start(due)
            first = cursor.next(due)
            second = None if first is None else cursor.next(first)
            if first is not None and second is not None:
                period = second - first
        except Exception:  # a schedule this rota cannot step: the minute holds
            period = None
    return max(GRACE, float(period or 0))


def overdue(info: TaskInfo, now: float) -> bool:
    """Whether a scheduled job's next run is past its :func:`grace` at ``now`` and it
    is not paused: no node is running it. The one rule of ``rota check``,
    ``rota status``'s marker and the dashboard's. O(1)."""
    due = info.next_run_time
    return (
        str(info.status) == "scheduled"
        and not info.paused
        and due is not None
        and now - due > grace(info.schedule, due)
    )


WAITING = 1.0
"""Seconds past its time after which a due, unclaimed run is shown as waiting."""


def lateness(info: TaskInfo, now: float) -> str | None:
    """How a scheduled job's due run is late at ``now``, for people: ``"overdue"``
    (:func:`overdue`: no node runs it), ``"waiting for a worker"`` (due over
    :data:`WAITING` s ago, within its grace: every worker of the nodes that can run
    it is busy, or none has looked yet), or ``None``. ``rota status`` and the
    dashboard show it beside the next run. O(1)."""
    if overdue(info, now):
        return "overdue"
    due = info.next_run_time
    if str(info.status) == "scheduled" and not info.paused and due is not None:
        return "waiting for a worker" if now - due > WAITING else None
    return None
