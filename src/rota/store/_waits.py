"""The store's side of waiting runs (``after=``): how an upstream's slots ended (one
read), and the index of waiting runs that a completion wakes, the same SQL in every
database store."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rota._core.types import FINISHED, Time

from ._base import Change, TaskRow, _same


def ended_rows(
    rows: Iterable[tuple[Time, str, Time | None]], start: Time, end: Time
) -> tuple[dict[Time, str], Time | None]:
    """:meth:`Store.ended` from the final outcomes ``(slot, result, started)`` a store
    read: every store's one rule. O(len(rows))."""
    ends = {slot: result for slot, result, _ in rows if start <= slot < end}
    started = [at for _, result, at in rows if result == "ok" and at is not None]
    return ends, max(started, default=None)


def ended_sql(p: str, mark: str) -> str:
    """The query of :meth:`Store.ended` (``mark``: the placeholder): a task's final
    outcomes in a slot range, and its latest ``ok`` one (by slot: the primary key's
    order), each an index range."""
    return (
        f"SELECT slot, result, started FROM {p}outcomes WHERE task_id = {mark} AND "
        f"result != 'retry' AND slot >= {mark} AND slot < {mark} UNION ALL SELECT * FROM "
        f"(SELECT slot, result, started FROM {p}outcomes WHERE task_id = {mark} AND "
        "result = 'ok' ORDER BY slot DESC LIMIT 1) AS latest"
    )


def waiting_for(row: TaskRow) -> list[str]:
    """The upstream ids a written row's run waits for (``after=``; none unless its run
    is scheduled and waits): what the store's index of waiting runs holds for it."""
    spec, state = row.spec, row.state
    if not isinstance(spec, dict) or not spec.get("after") or row.status != "scheduled":
        return []
    return [upstream[0] for upstream in spec["after"]] if state.get("waiting") else []


def wakes(changes: Iterable[Change[Any] | None]) -> tuple[list[TaskRow], list[str]]:
    """The rows a write wrote, and the tasks whose waiting dependants it wakes: each
    whose run ended for good, each written finished."""
    done = [change for change in changes if change is not None]
    rows = [change.row for change in done if change.row is not None]
    found = [
        change.outcome.task_id
        for change in done
        if change.outcome is not None and change.outcome.result != "retry"
    ]
    return rows, found + [row.task_id for row in rows if row.status in FINISHED]


def sync_waits(
    execute: Callable[[str, Sequence[Any]], object],
    p: str,
    mark: str,
    rows: Iterable[TaskRow],
    woken: Iterable[str],
    encode: Callable[[Any], Any] = _same,
    *,
    share: bool = False,
    notify: str | None = None,
) -> None:
    """Keep a database store's index of waiting runs (``{p}waits``: upstream ->
    task, and the waiting run's own time) for the rows just written (only rows
    with ``after`` touch it), then wake the waiting runs of the ``woken``
    upstreams: due at their own time, so a claim decides them again in time order
    with every other run, as in memory. In the write's transaction: two statements
    per row with ``after`` (none for the others; ``share``: three for a waiting
    one), and one per :data:`WAKE_CHUNK` upstreams that ended (a group commit's:
    one).

    ``share`` (a store whose writers run at once, PostgreSQL under read committed)
    locks a waiting run's upstream rows ``FOR SHARE``, in id order, in the
    transaction that parks it. An upstream's end updates its row before its
    wake-up statement, which reads a snapshot of its own: either the park's lock
    came first, so the update waits for the park's commit and the wake-up sees the
    parked run; or the update came first, so the park's commit waits for the end's
    and the parking node's check after its write (``Triage``) sees the end. Without
    it a wake-up whose snapshot was taken before the park's commit, in an end that
    committed after that check, woke no one.

    ``notify`` (PostgreSQL: the channel nodes ``LISTEN`` on) is notified, at commit,
    by a wake-up that woke a run, so that another node idle until later claims it at
    once rather than at its next poll (in the same statement)."""
    for row in rows:
        if not isinstance(row.spec, dict) or not row.spec.get("after"):
            continue
        execute(f"DELETE FROM {p}waits WHERE task_id = {mark}", (row.task_id,))
        at = encode(row.state.get("nominal", row.due))
        upstreams = sorted(set(waiting_for(row)))
        if share and upstreams:
            execute(
                f"SELECT 1 FROM {p}tasks WHERE task_id IN ({','.join([mark] * len(upstreams))}) "
                "ORDER BY task_id FOR SHARE",
                upstreams,
            )
        for upstream in upstreams:
            execute(
                f"INSERT INTO {p}waits (upstream, task_id, at) VALUES ({mark}, {mark}, {mark}) "
                "ON CONFLICT DO NOTHING",
                (upstream, row.task_id, at),
            )
    ids = sorted(set(woken))
    own = f"(SELECT min(w.at) FROM {p}waits w WHERE w.task_id = {p}tasks.task_id)"
    for start in range(0, len(ids), WAKE_CHUNK):  # one statement for a group commit's ends
        chunk = ids[start : start + WAKE_CHUNK]
        wake = (
            f"UPDATE {p}tasks SET due = {own}, version = version + 1 WHERE task_id IN "
            f"(SELECT task_id FROM {p}waits WHERE upstream IN ({','.join([mark] * len(chunk))})) "
            f"AND status = 'scheduled' AND owner IS NULL AND due > {own}"
        )
        if notify is None:
            execute(wake, chunk)
        else:
            execute(
                f"WITH woken AS ({wake} RETURNING 1) SELECT pg_notify({mark}, '') "
                "WHERE EXISTS (SELECT 1 FROM woken)",
                [*chunk, notify],
            )


WAKE_CHUNK = 512
"""The most upstreams one wake-up statement names."""
