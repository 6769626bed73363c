"""Writing a whole stored row in a database store: the row, and what is kept beside it
when it is declared anew (its pool's size, the index of tags). The one writer of
whole rows of every database store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._base import COLUMNS, ROW_COLUMNS, TaskRow, _same, row_values, update_sql


def write_row(
    execute: Callable[[str, Sequence[Any]], object],
    table: str,
    new: TaskRow,
    old: TaskRow | None,
    mark: str,
    encode: Callable[[Any], Any] = _same,
    *,
    before: dict[str, Any] | None = None,
) -> None:
    """Write ``new`` in a database store's ``table`` (``{prefix}tasks``) through its
    ``execute`` (``mark`` its parameter mark, times through ``encode``): over ``old``,
    or inserted if there was none, with its pool's name (a column of its own, for the
    claims' count of places). ``before`` is the spec as stored before (``old``'s, read
    before the change was decided: a decision may replace the row's spec): a spec
    declared anew also writes its pool's size (the size last declared for a name is
    the pool's) and the index of tags. One statement; a few more for a declaration."""
    found = new.spec.get("pool")
    values = (*row_values(new, encode), None if not isinstance(found, dict) else found["name"])
    if old is None:
        marks = ",".join([mark] * len(values))
        execute(f"INSERT INTO {table} ({COLUMNS}, pool) VALUES ({marks})", values)
    else:
        execute(
            update_sql(table, f"{ROW_COLUMNS}, pool", mark, f"task_id = {mark}"),
            (*values[1:], old.task_id),
        )
    if before is new.spec or (before is not None and before == new.spec):
        return
    p = table.removesuffix("tasks")
    if isinstance(found, dict):
        execute(
            f"INSERT INTO {p}pools (name, size) VALUES ({mark}, {mark}) "
            "ON CONFLICT (name) DO UPDATE SET size = excluded.size",
            (found["name"], found["size"]),
        )
    tags, had = tags_of(new.spec), [] if before is None else tags_of(before)
    if tags != had:
        if old is not None:
            execute(f"DELETE FROM {p}tags WHERE task_id = {mark}", (new.task_id,))
        for tag in sorted(set(tags)):
            execute(f"INSERT INTO {p}tags (tag, task_id) VALUES ({mark}, {mark})",
                    (tag, new.task_id))  # fmt: skip


def tags_of(spec: Any) -> list[str]:
    """A spec's tags (``spec["tags"]``), as written. O(tags)."""
    found = spec.get("tags") if isinstance(spec, dict) else None
    return [tag for tag in found if isinstance(tag, str)] if isinstance(found, list) else []
