"""Argument checks shared by every public entry point.

Each check raises before the caller changes any state, with a message that
names the argument as the signature spells it and shows the value.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, TypeVar

from ._types import Time

T = TypeVar("T")


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def is_number(value: object) -> bool:
    """True for an int or float that is not a bool. O(1)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(name: str, value: Any) -> Time:
    """Return ``value`` if it is an int or float (not a bool); else ``TypeError``."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number (int or float), got {_shown(value)}")
    return value  # type: ignore[no-any-return]


def finite(name: str, value: Any) -> Time:
    """A number that is neither NaN nor infinite (``ValueError``)."""
    number(name, value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value  # type: ignore[no-any-return]


def delay(name: str, value: Any) -> Time:
    """A finite number >= 0: ``TypeError`` for a non-number, ``ValueError`` otherwise."""
    number(name, value)
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value  # type: ignore[no-any-return]


def positive(name: str, value: Any) -> Time:
    """A finite number > 0: ``TypeError`` for a non-number, ``ValueError`` otherwise."""
    number(name, value)
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value  # type: ignore[no-any-return]


def count(name: str, value: Any) -> int:
    """An int >= 0 (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {_shown(value)}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def hashable(name: str, value: Any) -> Hashable:
    """A value usable as a dict key (``TypeError`` otherwise)."""
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{name} must be hashable, got {_shown(value)}") from None
    return value  # type: ignore[no-any-return]


def callable_(name: str, value: T) -> T:
    """A callable (``TypeError`` otherwise)."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {_shown(value)}")
    return value
