"""The stores' side of pools (``rota.Pool``): a place is the lease of a pooled row, so
at most a pool's size of its rows are claimed at once across every node; the same
SQL in every database store, the same rule in :class:`~rota.store.MemoryStore`.

A claim leaves out the rows of a full pool (:func:`full_sql`, :func:`open_sql`), then
checks the pools of the rows it took (:func:`settle`): the pools locked (PostgreSQL,
``FOR UPDATE``: nodes claiming from one pool check one after another, each seeing the
others' committed claims; SQLite has one writer), their places counted, and the rows
this claim took beyond a pool's size given back, the latest first. A dead holder keeps
its place until its lease is taken over (its run may still be going on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rota._core.types import LEASED

from ._base import LEASED_SQL, TaskRow, run_order

POOL = "pool"
"""The key of a task's pool in its spec (``{"name": ..., "size": ...}``)."""


def pool_steps(p: str) -> list[str]:
    """Schema step 8's part, the same in every dialect: each row's pool (a column,
    written with the row) and each pool's size."""
    return [
        # no index of its own: a count of places reads the runs in flight (the owner
        # index), which are few; one on the pools' leased rows cost every pooled run
        # a page more in each of its two commits (measured: 13 % of a SQLite run)
        f"ALTER TABLE {p}tasks ADD COLUMN pool TEXT",
        f"CREATE TABLE IF NOT EXISTS {p}pools (name TEXT PRIMARY KEY, size INTEGER NOT NULL)",
    ]


def pool_name(row: TaskRow) -> str | None:
    """The name of ``row``'s pool, ``None`` if it has none. O(1)."""
    found = row.spec.get(POOL)
    return None if not isinstance(found, dict) else found.get("name")


def in_use_sql(p: str, pool: str) -> str:
    """The places held in pool ``pool`` (an SQL expression): its rows under a lease."""
    return (
        f"(SELECT count(*) FROM {p}tasks h WHERE h.pool = {pool} AND h.owner IS NOT NULL "
        f"AND h.status IN {LEASED_SQL})"
    )


def full_sql(p: str) -> str:
    """The names of the full pools: a claim leaves their rows out."""
    return f"SELECT o.name FROM {p}pools o WHERE o.size <= {in_use_sql(p, 'o.name')}"


def open_sql(p: str) -> str:
    """A due row's condition to be claimed, in one statement: it is in no pool, or in
    one with a place (read at the statement's start; :func:`settle` makes it exact)."""
    return f"(pool IS NULL OR pool NOT IN ({full_sql(p)}))"


def settle(
    execute: Callable[[str, Sequence[Any]], Any],
    p: str,
    mark: str,
    claimed: Iterable[TaskRow],
    *,
    lock: bool,
) -> set[str]:
    """Give back the rows a claim just took (``claimed``) beyond their pools' sizes, the
    latest first; their ids. After the claim's statements, before any of its runs
    starts: in the claim's transaction, or (a PostgreSQL claim whose statements
    committed alone) in one of its own. A lease taken over is given back too when its
    pool is over its size (a claim whose check never ran, its node gone), so a place
    taken over is never one too many. ``lock`` (PostgreSQL: claims run at once) locks
    the pools first, so that each claim counts the others' committed places; without
    it (SQLite: one writer) a pool of which the claim took one row is not looked at
    (the claim's own read found a place in it). Nothing for a claim of no pooled row;
    else two statements, three when rows are given back."""
    by_pool: dict[str, list[TaskRow]] = {}
    for row in claimed:
        name = pool_name(row)
        if name is not None:
            by_pool.setdefault(name, []).append(row)
    if not lock:  # one writer: a pool the claim's own read found open had a place for one
        by_pool = {name: rows for name, rows in by_pool.items() if len(rows) > 1}
    if not by_pool:
        return set()
    names = sorted(by_pool)
    marks = ",".join([mark] * len(names))
    if lock:
        execute(f"SELECT 1 FROM {p}pools WHERE name IN ({marks}) ORDER BY name FOR UPDATE", names)
    rooms = dict(
        execute(
            f"SELECT o.name, o.size - {in_use_sql(p, 'o.name')} FROM {p}pools o "
            f"WHERE o.name IN ({marks})",
            names,
        ).fetchall()
    )
    given: list[str] = []
    for name, rows in by_pool.items():
        over = -int(rooms.get(name, 0))
        if over > 0:
            latest = sorted(rows, key=run_order, reverse=True)
            given += [row.task_id for row in latest[:over]]
    if given:
        execute(
            f"UPDATE {p}tasks SET status = 'scheduled', owner = NULL, lease_until = NULL "
            f"WHERE task_id IN ({','.join([mark] * len(given))})",
            given,
        )
    return set(given)


def pools_sql(p: str) -> str:
    """Every pool: its name, its size and its rows under a lease, by name (read by
    :func:`pool_use`)."""
    return f"SELECT o.name, o.size, {in_use_sql(p, 'o.name')} FROM {p}pools o ORDER BY o.name"


def pool_use(found: Iterable[Sequence[Any]]) -> dict[str, tuple[int, int]]:
    """:meth:`Store.pools` from :func:`pools_sql`'s rows. A PostgreSQL claim's statements
    commit alone, and its check (:func:`settle`) gives back what it took beyond a size
    just after, before any of it starts: for that instant a pool's leased rows may be
    more than its size, but its places in use are not. O(pools)."""
    return {name: (int(size), min(int(used), int(size))) for name, size, used in found}


def memory_pools(rows: Iterable[TaskRow], sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """:meth:`Store.pools` of rows kept in memory, ``sizes`` the pools' sizes. O(rows)."""
    used = dict.fromkeys(sizes, 0)
    for row in rows:
        name = pool_name(row)
        if name is not None and row.owner is not None and row.status in LEASED:
            used[name] = used.get(name, 0) + 1
    return {name: (sizes[name], used.get(name, 0)) for name in sorted(sizes)}
