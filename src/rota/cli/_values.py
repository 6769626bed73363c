"""The values a job file (and the command line) spells: durations, instants, zones, dates
and times of day; each refused with a :class:`JobFileError` naming where it was."""

from __future__ import annotations

import re
from datetime import date, datetime, time, tzinfo
from typing import Any

from rota._core import validate as _validate

_UNITS = {"ms": 0.001, "s": 1, "min": 60, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|min|s|m|h|d)")


class JobFileError(ValueError):
    """A job file (or a command-line value) that cannot be used as it is."""


def duration(value: object, what: str) -> float:
    """Seconds from a number or ``"500ms"``, ``"15s"``, ``"5m"``, ``"2h"``, ``"1d"``, ``"1h30m"``.

    Raises :class:`JobFileError` (naming ``what``) for anything else or for 0.
    """
    text = value.replace(" ", "") if isinstance(value, str) else None
    parts = _DURATION.findall(text) if text else []
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif parts and "".join(n + u for n, u in parts) == text:
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise JobFileError(f"{what}: {value!r} is not a duration (e.g. 90s, 5m, 1h30m, 1d)")
    if not 0 < seconds < float("inf"):
        raise JobFileError(f"{what}: {value!r} must be a positive duration")
    return seconds


def instant(value: object, what: str, zone: tzinfo | None = None) -> datetime:
    """An aware datetime from ISO 8601 (a TOML datetime too); naive ones are in ``zone``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise JobFileError(
                f"{what}: {value!r} is not an ISO 8601 time (e.g. 2026-12-24T18:00:00+01:00)"
            ) from None
    if not isinstance(value, datetime):
        raise JobFileError(f"{what}: {value!r} is not an ISO 8601 time")
    if value.tzinfo is None:
        if zone is None:
            raise JobFileError(f"{what}: {value!r} has no UTC offset; add one (e.g. +01:00)")
        value = value.replace(tzinfo=zone)
    return value


def zone(value: object, what: str) -> tzinfo:
    """An IANA zone; :class:`JobFileError` for an unknown one."""
    try:
        return _validate.zone("tz", value)
    except TypeError:
        raise JobFileError(f"{what}: {value!r} is not a time zone name") from None
    except ValueError:
        raise JobFileError(f"{what}: unknown time zone {value!r} (e.g. Europe/Berlin)") from None


def iso(value: object, what: str, kind: type[date] | type[time]) -> Any:
    """``value`` as a ``kind`` (a date, a time of day): a TOML date or time as it is, or
    ISO text; :class:`JobFileError` naming ``what`` otherwise."""
    if type(value) is kind:
        return value
    if isinstance(value, str):
        try:
            return kind.fromisoformat(value)
        except ValueError:
            pass
    shape = '("YYYY-MM-DD")' if kind is date else 'of day ("HH:MM")'
    raise JobFileError(f"{what}: {value!r} is not a {kind.__name__} {shape}")
