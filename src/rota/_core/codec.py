"""What a durable task stores instead of Python objects: names, paths and JSON.

Actions are stored as a registered name or an import path
(``"package.module:function"``), never pickled; arguments as JSON, checked
when the task is scheduled; schedules, retry policies and ``retry_on`` as
JSON specs of built-in kinds. Anything that cannot be stored this way is
refused at schedule time with a message that says what to do.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterable, Mapping
from datetime import time
from typing import Any, TypeVar

from rota.calendars import AnyOf, BusinessDay, Calendar
from rota.overlap import Overlap
from rota.retry import Backoff, NoRetry
from rota.schedules import FixedDelay, FixedRate, Once

from .moves import Calendared
from .policy import RetryPolicy, Schedule
from .types import StoreError, Time

T = TypeVar("T")
JSON_HELP = "str, int, float, bool, None, and lists and dicts (with str keys) of them"


def json_value(name: str, value: Any, path: str = "") -> Any:
    """``value`` as JSON-compatible data (tuples become lists), or ``TypeError``.

    The message names the argument, where in it the offending value sits and
    the value. O(size of value).
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{name}{path} is {value!r}: JSON has no NaN or infinity")
        return value
    if isinstance(value, list | tuple):
        return [json_value(name, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{name}{path} has the key {key!r}: JSON keys must be str")
            out[key] = json_value(name, item, f"{path}[{key!r}]")
        return out
    raise TypeError(
        f"{name}{path} is {value!r} ({type(value).__name__}): a durable task's arguments "
        f"are stored as JSON ({JSON_HELP}); pass an id or a plain value instead"
    )


# -- actions -------------------------------------------------------------------


def import_path(obj: object) -> str | None:
    """``"module:qualname"`` if importing it gives back ``obj`` itself, else ``None``."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    path = f"{module}:{qualname}"
    try:
        found = resolve_path(path)
    except (ImportError, AttributeError):
        return None
    return path if found is obj else None


def resolve_path(path: str) -> Any:
    """Import ``"module:qualname"``; ``ImportError``/``AttributeError`` if it is not there."""
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def refusal(action: object) -> TypeError:
    """The error for an action a durable task cannot name."""
    kind = (
        "a lambda"
        if getattr(action, "__name__", None) == "<lambda>"
        else "a nested function"
        if "<locals>" in getattr(action, "__qualname__", "")
        else "not importable by its name"
    )
    return TypeError(
        f"action {action!r} is {kind}: a durable task stores its action by name, to call it "
        "in any process after a restart. Define it at module level, or register it: "
        "scheduler.register('a-name', fn) (or @scheduler.action('a-name')), then schedule "
        "'a-name'"
    )


# -- schedules -------------------------------------------------------------------


def schedule_spec(when: object) -> dict[str, Any]:
    """A schedule as stored: its ``spec()``. ``TypeError`` for one without."""
    spec = getattr(when, "spec", None)
    if not callable(spec) or not callable(getattr(when, "resume", None)):
        raise TypeError(
            f"when must be a schedule a store can keep (Once, FixedRate, FixedDelay, Cron), "
            f"got {when!r}: it has no spec()/resume()"
        )
    value = spec()
    return json_value("the schedule's spec", value)  # type: ignore[no-any-return]


def schedule_from(spec: Mapping[str, Any]) -> Schedule:
    """The schedule a stored spec describes. :class:`StoreError` for an unknown kind.

    Schedules are immutable: one object per distinct spec is kept and shared.
    """
    return _cached(_SCHEDULES, spec, _schedule)


_CACHED = 1024
_SCHEDULES: dict[tuple[Any, ...], Schedule] = {}
_RETRIES: dict[tuple[Any, ...], RetryPolicy] = {}


def _cached(cache: dict[tuple[Any, ...], T], spec: Mapping[str, Any], make: Any) -> T:
    """One object per distinct flat spec (policies are immutable), made on first need.

    Keyed by the spec's items in their order: specs are built in one order per
    kind, and a different order costs only a second object.
    """
    key: Any = tuple(spec.items())
    try:
        hash(key)
    except TypeError:  # a spec with lists in it (AnyOf's members, a calendar): as text
        key = json.dumps(spec, sort_keys=True)
    found = cache.get(key)
    if found is None:
        if len(cache) >= _CACHED:
            cache.clear()
        found = cache[key] = make(spec)
    return found


def calendared_from(when: Schedule, spec: dict[str, Any] | None) -> Schedule:
    """``when`` under the calendar a stored spec keeps beside its schedule
    (:func:`rota._core.moves.calendar_spec`), or ``when`` itself for none."""
    if spec is None:
        return when
    return Calendared(when, Calendar.from_json(spec["calendar"]), spec["on_excluded"])


def _schedule(spec: Mapping[str, Any]) -> Schedule:
    kind = spec.get("kind")
    if kind == "once":
        if spec["at"] is not None:
            return Once(at=spec["at"])
        return Once(spec["delay"])
    if kind == "fixed_rate":
        if spec["start"] is not None:
            return FixedRate(spec["period"], start=spec["start"])
        return FixedRate(spec["period"], delay=spec["delay"])
    if kind == "fixed_delay":
        return FixedDelay(spec["delay"], initial_delay=spec["initial_delay"])
    if kind == "cron":
        from rota.cron import Cron

        return Cron(spec["expression"], tz=spec["tz"])
    if kind == "any_of":
        return AnyOf(*(schedule_from(member) for member in spec["schedules"]))
    if kind == "calendared":
        return Calendared(
            schedule_from(spec["schedule"]),
            Calendar.from_json(spec["calendar"]),
            spec["on_excluded"],
        )
    if kind == "business_day":
        at = time.fromisoformat(spec["at"])
        return BusinessDay(spec["n"], at, Calendar.from_json(spec["calendar"]))
    raise StoreError(f"a stored schedule of unknown kind {kind!r}: {dict(spec)!r}")


# -- retry policies ------------------------------------------------------------


def overlap_spec(overlap: Overlap) -> object:
    """An overlap policy as a spec stores it: ``None`` (the default, ``BUFFER``, stored
    as nothing), ``"skip"``, ``"replace"`` or ``{"allow": n}``. O(1)."""
    if overlap.mode == "allow":
        return {"allow": overlap.limit}
    return None if overlap == Overlap.BUFFER else overlap.mode


def overlap_from(value: object) -> Overlap:
    """The overlap policy a spec stores (what :func:`overlap_spec` wrote). O(1)."""
    if isinstance(value, dict):
        return Overlap.allow(value["allow"])
    return _OVERLAPS[value]  # (a KeyError: a policy a newer rota wrote, refused)


_OVERLAPS: dict[object, Overlap] = {
    None: Overlap.BUFFER, "skip": Overlap.SKIP, "replace": Overlap.REPLACE,
}  # fmt: skip


def retry_spec(retry: RetryPolicy | None, backoff: Time) -> dict[str, Any]:
    """A retry policy as stored; ``None`` is the scheduler's default, ``Backoff(backoff)``."""
    if retry is None:
        return {"kind": "backoff", "base": backoff, "cap": None, "jitter": None}
    if isinstance(retry, Backoff):
        return {"kind": "backoff", "base": retry.base, "cap": retry.cap, "jitter": retry.jitter}
    if isinstance(retry, NoRetry):
        return {"kind": "none"}
    raise TypeError(
        f"retry must be Backoff(...) or NoRetry() for a durable task (stored as data), "
        f"got {retry!r}"
    )


def retry_from(spec: Mapping[str, Any]) -> RetryPolicy:
    """The retry policy a stored spec describes (one shared object per distinct spec)."""
    return _cached(_RETRIES, spec, _retry)


def _retry(spec: Mapping[str, Any]) -> RetryPolicy:
    if spec["kind"] == "none":
        return NoRetry()
    if spec["kind"] == "backoff":
        return Backoff(spec["base"], cap=spec["cap"], jitter=spec["jitter"])
    raise StoreError(f"a stored retry policy of unknown kind: {dict(spec)!r}")


def retry_on_spec(retry_on: object) -> list[str] | None:
    """Exception types as import paths; ``TypeError`` for a predicate or a local class."""
    if retry_on is None:
        return None
    if isinstance(retry_on, StoredTypes):  # read from a store: as it was stored
        return list(retry_on.listed)
    types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    paths = []
    for kind in types:
        path = import_path(kind) if isinstance(kind, type) else None
        if path is None:
            raise TypeError(
                "retry_on must be exception types defined at module level for a durable "
                f"task (stored by name), got {retry_on!r}"
            )
        paths.append(path)
    return paths


def retry_on_from(paths: list[str] | None) -> StoredTypes | None:
    """The exception types stored by :func:`retry_on_spec`, as data (see
    :class:`StoredTypes`): nothing a row names is imported."""
    if paths is None:
        return None
    return StoredTypes(paths)


class StoredTypes:
    """A stored ``retry_on``: exception types by import path, matched against the
    names of a raised error's classes (its MRO), never imported. For types defined
    at module level (the only ones :func:`retry_on_spec` stores) this is
    ``isinstance``; and a row, which whoever can write the store can write, cannot
    make a node import a module. O(depth of the error's class hierarchy) a call."""

    __slots__ = ("listed", "paths")

    def __init__(self, paths: Iterable[str]) -> None:
        self.listed = tuple(paths)  # as stored, in order
        self.paths = frozenset(self.listed)

    def __call__(self, error: BaseException) -> bool:
        return any(f"{k.__module__}:{k.__qualname__}" in self.paths for k in type(error).__mro__)

    def __repr__(self) -> str:
        return f"StoredTypes({list(self.listed)!r})"
