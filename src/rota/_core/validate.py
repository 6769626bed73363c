"""Argument checks shared by every public entry point.

Each check raises before the caller changes any state, with a message that
names the argument as the signature spells it and shows the value.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from datetime import datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .types import Time

T = TypeVar("T")

PLAIN = frozenset({int, float})
"""The exact types of the numbers the fast paths accept without further checks."""

LIMIT = sys.float_info.max
"""The largest magnitude a time or delay may have: every time must fit a float, so
that sums stay comparable and a runner can sleep until it (``10**400`` is refused)."""


def _described(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def is_number(value: object) -> bool:
    """True for an int or float that is not a bool. O(1)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(name: str, value: Any) -> Time:
    """Return ``value`` if it is an int or float (not a bool); else ``TypeError``."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number (int or float), got {_described(value)}")
    return value  # type: ignore[no-any-return]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} digits)"


def instant(name: str, value: Any) -> Any:
    """An aware ``datetime`` as POSIX seconds; any other value as it is.

    Raises ``ValueError`` for a naive datetime (it names no instant). O(1).
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{name} must be an aware datetime (with a tzinfo, e.g. "
                f"datetime.now(timezone.utc)), got the naive {value!r}"
            )
        return value.timestamp()
    return value


def seconds(value: Any) -> Any:
    """A ``timedelta`` as float seconds; any other value as it is. O(1)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def finite(name: str, value: Any) -> Time:
    """A time: a number that is not NaN, infinite or beyond float range (``ValueError``).

    An aware ``datetime`` is taken as POSIX seconds (a naive one is refused).
    """
    if (type(value) is float or type(value) is int) and -LIMIT <= value <= LIMIT:
        return value  # the fast path (a stored cursor is read back on every claim)
    value = instant(name, value)
    number(name, value)
    if not -LIMIT <= value <= LIMIT:
        raise ValueError(f"{name} must be a finite number, got {_short(value)}")
    return value  # type: ignore[no-any-return]


def optional_time(name: str, value: Any) -> Time | None:
    """``None``, or a time as :func:`finite` checks it."""
    return None if value is None else finite(name, value)


def delay(name: str, value: Any) -> Time:
    """A finite number >= 0, or a ``timedelta`` as seconds: ``TypeError``/``ValueError``."""
    value = seconds(value)
    number(name, value)
    if not 0 <= value <= LIMIT:
        raise ValueError(f"{name} must be a finite number >= 0, got {_short(value)}")
    return value  # type: ignore[no-any-return]


def positive(name: str, value: Any) -> Time:
    """A finite number > 0, or a ``timedelta`` as seconds: ``TypeError``/``ValueError``."""
    value = seconds(value)
    number(name, value)
    if not 0 < value <= LIMIT:
        raise ValueError(f"{name} must be a finite number > 0, got {_short(value)}")
    return value  # type: ignore[no-any-return]


def time_from(source: str, value: Any) -> Time:
    """A time produced by user code (a clock, schedule, cursor or retry policy).

    ``TypeError`` for a non-number, ``ValueError`` for NaN, infinity or a
    number beyond float range; the message names ``source``. O(1).
    """
    if type(value) is float or type(value) is int:  # the fast path: one check
        if -LIMIT <= value <= LIMIT:
            return value
    elif not is_number(value):
        raise TypeError(f"{source} returned {_described(value)}, not a number (int or float)")
    elif -LIMIT <= value <= LIMIT:
        return value  # type: ignore[no-any-return]
    raise ValueError(f"{source} returned {_short(value)}, not a finite time")


def count(name: str, value: Any) -> int:
    """An int >= 0 (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {_described(value)}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def at_least_one(name: str, value: Any) -> int:
    """An int >= 1 (not a bool): ``TypeError``/``ValueError`` naming ``name``."""
    if count(name, value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return int(value)


def page(after: Any, limit: Any) -> None:
    """A page's bounds as ``tasks()``/``listing()`` take them: ``after`` a task id
    (str) or ``None``, ``limit`` an int >= 1 or ``None`` (``TypeError``/``ValueError``
    otherwise)."""
    if limit is not None:
        if type(limit) is not int:
            raise TypeError(f"limit must be an int or None, got {_described(limit)}")
        if limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit!r}")
    if after is not None and not isinstance(after, str):
        raise TypeError(f"after must be a task id (str) or None, got {_described(after)}")


def hashable(name: str, value: Any) -> Hashable:
    """A value usable as a dict key (``TypeError`` otherwise)."""
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{name} must be hashable, got {_described(value)}") from None
    return value  # type: ignore[no-any-return]


def callable_(name: str, value: T) -> T:
    """A callable (``TypeError`` otherwise)."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {_described(value)}")
    return value


def zone(name: str, value: object) -> ZoneInfo:
    """The IANA zone named ``value``. Raises ``TypeError`` for a non-str and
    ``ValueError`` for a name no zone has, each naming ``name``. O(1) once loaded."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be an IANA zone name (str), got {value!r}")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name} {value!r} is not a known IANA time zone") from None
