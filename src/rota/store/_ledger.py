"""A store's ledger: what operating a fleet keeps beside the tasks and their runs.

Settings a node writes for every other process to read (the retention rule), the
audit log of control actions, and the alerts' outbox (an alert is a row before it
is sent, so a node that dies between a run's commit and the alert's delivery leaves
it for a restart or another node, and its key keeps it from being sent twice). The
SQL is written once for both databases (:class:`SqlLedger`); memory keeps the same
rows in dicts (:class:`MemoryLedger`). The ledger decides nothing: who alerts when,
and what a rule keeps, is decided above it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from rota._core.types import Time


class AuditRow(NamedTuple):
    """One control action as the audit log keeps it."""

    at: float
    """When (epoch seconds)."""
    who: str
    """A token's name, ``cli:<user>@<host>``, ``login``, ``local``."""
    action: str
    """``pause``, ``resume``, ``trigger``, ``cancel``, ``backfill``, ``update``, ..."""
    job: str | None
    """The job it acted on (``None``: none, as a refused request for an unknown job)."""
    note: str | None
    """The note given with it."""
    applied: bool
    """Whether it changed something (refused, or not applicable now: ``False``)."""


class AlertRow(NamedTuple):
    """One alert in the outbox: its identity ``(job, event, key)`` is sent at most once."""

    job: str
    event: str
    """``failing``, ``recovered``, ``running_long``, ``paused``, ``overdue``."""
    key: str
    """What makes it one alert: the run's key (or the episode's)."""
    body: dict[str, Any]
    """The JSON body delivered (destinations render it their way)."""
    at: float
    """When it was raised (epoch seconds)."""
    sent: float | None = None
    """When it was delivered (or given up on), ``None`` while it waits."""


class Ledger(Protocol):
    """The ledger of a store (``store.ledger``). Each method is one short transaction."""

    def setting(self, name: str) -> Any:
        """A setting's JSON value, ``None`` when unset. O(1)."""

    def put_setting(self, name: str, value: Any) -> None:
        """Set (``None``: unset) a setting a node publishes for the others. O(1)."""

    def settings(self, names: Sequence[str]) -> dict[str, Any]:
        """The settings of ``names`` that are set, by name. O(len(names))."""

    def swap(self, name: str, old: Any, new: Any) -> bool:
        """Set a setting to ``new`` if it is ``old`` now (``None``: unset): whether it
        was, so that processes deciding from it at once decide once. O(1)."""

    def swaps(self, changes: Sequence[tuple[str, Any, Any]]) -> list[bool]:
        """:meth:`swap` for each ``(name, old, new)``, in one transaction; whether each
        was set. O(len(changes))."""

    def audit(self, row: AuditRow) -> None:
        """Append a control action to the audit log. O(1)."""

    def audits(self, job: str | None, limit: int) -> list[AuditRow]:
        """The latest ``limit`` actions (on ``job`` only, if given), newest first."""

    def alert(self, row: AlertRow) -> bool:
        """Put an alert in the outbox; ``False`` if one of its identity is there. O(1)."""

    def alerts(self, unsent: bool, limit: int) -> list[AlertRow]:
        """The oldest ``limit`` alerts waiting to be sent (``unsent``), else the latest
        ``limit`` of them all, newest first."""

    def take(self, row: AlertRow, node: str, until: Time, now: Time) -> bool:
        """Whether ``node`` may send ``row`` now: ``True`` for one taker at a time (a
        take lasts until ``until``, after which another node may take it)."""

    def release(self, row: AlertRow, until: Time) -> None:
        """Let any node take an alert its taker could not deliver, from ``until`` on."""

    def sent(self, row: AlertRow, at: Time) -> None:
        """Mark an alert delivered (or given up on) at ``at``."""

    def trim(self, before: Time | None, keep_runs: int | None, limit: int) -> int:
        """Delete at most ``limit`` of: each task's recorded runs beyond its newest
        ``keep_runs``, and the runs, audit entries and alerts older than ``before``
        (``None``: no such rule). How many rows went. One transaction."""


Run = Callable[
    [Sequence[tuple[str, Sequence[Any]]], bool], list[tuple[list[tuple[Any, ...]], int]]
]
"""How a database store runs statements for its ledger: ``([(sql, params), ...],
write)`` to each one's ``(rows, rowcount)``; writes in one transaction of their own
(``?`` placeholders)."""


def ledger_steps(p: str, serial: str, real: str) -> list[str]:
    """The schema step that adds the ledger's tables (``serial``: the database's
    auto-numbered key column, ``real``: its float type)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {p}audit (id {serial}, at {real} NOT NULL, "
        "who TEXT NOT NULL, action TEXT NOT NULL, task_id TEXT, note TEXT, "
        "applied INTEGER NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {p}audit_task ON {p}audit (task_id, id)",
        f"CREATE INDEX IF NOT EXISTS {p}audit_at ON {p}audit (at)",
        f"CREATE TABLE IF NOT EXISTS {p}alerts (task_id TEXT NOT NULL, event TEXT NOT NULL, "
        f"key TEXT NOT NULL, body TEXT NOT NULL, at {real} NOT NULL, sent {real}, "
        f"taker TEXT, taken_until {real}, PRIMARY KEY (task_id, event, key))",
    ]


class SqlLedger:
    """The ledger in a database's tables (prefix ``p``), through ``run``."""

    def __init__(self, p: str, run: Run) -> None:
        self._p = p
        self._run = run

    def _one(
        self, sql: str, params: Sequence[Any], write: bool
    ) -> tuple[list[tuple[Any, ...]], int]:
        return self._run([(sql, params)], write)[0]

    def settings(self, names: Sequence[str]) -> dict[str, Any]:
        """See :meth:`Ledger.settings`. One query per 500 names."""
        found: dict[str, Any] = {}
        for at in range(0, len(names), 500):
            part = [_key(n) for n in names[at : at + 500]]
            marks = ", ".join("?" * len(part))
            sql = f"SELECT key, value FROM {self._p}meta WHERE key IN ({marks})"
            rows, _ = self._one(sql, part, False)
            found.update((key[len("setting:") :], json.loads(value)) for key, value in rows)
        return found

    def swaps(self, changes: Sequence[tuple[str, Any, Any]]) -> list[bool]:
        """See :meth:`Ledger.swaps`: one transaction."""
        if not changes:
            return []
        done = self._run([_swap_sql(self._p, *change) for change in changes], True)
        return [count == 1 for _, count in done]

    def setting(self, name: str) -> Any:
        """See :meth:`Ledger.setting`."""
        rows, _ = self._one(f"SELECT value FROM {self._p}meta WHERE key = ?", [_key(name)], False)
        return json.loads(rows[0][0]) if rows else None

    def put_setting(self, name: str, value: Any) -> None:
        """See :meth:`Ledger.put_setting`."""
        if value is None:
            self._one(f"DELETE FROM {self._p}meta WHERE key = ?", [_key(name)], True)
            return
        self._one(
            f"INSERT INTO {self._p}meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [_key(name), json.dumps(value)],
            True,
        )

    def swap(self, name: str, old: Any, new: Any) -> bool:
        """See :meth:`Ledger.swap`."""
        return self.swaps([(name, old, new)])[0]

    def audit(self, row: AuditRow) -> None:
        """See :meth:`Ledger.audit`."""
        self._one(
            f"INSERT INTO {self._p}audit (at, who, action, task_id, note, applied) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [row.at, row.who, row.action, row.job, row.note, int(row.applied)],
            True,
        )

    def audits(self, job: str | None, limit: int) -> list[AuditRow]:
        """See :meth:`Ledger.audits`."""
        where, params = ("WHERE task_id = ? ", [job]) if job is not None else ("", [])
        rows, _ = self._one(
            f"SELECT at, who, action, task_id, note, applied FROM {self._p}audit {where}"
            "ORDER BY id DESC LIMIT ?",
            [*params, limit],
            False,
        )
        return [AuditRow(float(a), w, c, j, n, bool(ok)) for a, w, c, j, n, ok in rows]

    def alert(self, row: AlertRow) -> bool:
        """See :meth:`Ledger.alert`."""
        _, count = self._one(
            f"INSERT INTO {self._p}alerts (task_id, event, key, body, at) VALUES "
            "(?, ?, ?, ?, ?) ON CONFLICT (task_id, event, key) DO NOTHING",
            [row.job, row.event, row.key, json.dumps(row.body), row.at],
            True,
        )
        return count == 1

    def alerts(self, unsent: bool, limit: int) -> list[AlertRow]:
        """See :meth:`Ledger.alerts`."""
        order = "WHERE sent IS NULL ORDER BY at" if unsent else "ORDER BY at DESC"
        rows, _ = self._one(
            f"SELECT task_id, event, key, body, at, sent FROM {self._p}alerts {order} LIMIT ?",
            [limit],
            False,
        )
        return [
            AlertRow(j, e, k, json.loads(b), float(a), None if s is None else float(s))
            for j, e, k, b, a, s in rows
        ]

    def take(self, row: AlertRow, node: str, until: Time, now: Time) -> bool:
        """See :meth:`Ledger.take`."""
        _, count = self._one(
            f"UPDATE {self._p}alerts SET taker = ?, taken_until = ? WHERE task_id = ? AND "
            "event = ? AND key = ? AND sent IS NULL AND (taken_until IS NULL OR "
            "taken_until < ?)",
            [node, until, row.job, row.event, row.key, now],
            True,
        )
        return count == 1

    def release(self, row: AlertRow, until: Time) -> None:
        """See :meth:`Ledger.release`."""
        self._one(
            f"UPDATE {self._p}alerts SET taken_until = ? WHERE task_id = ? AND event = ? "
            "AND key = ?",
            [until, row.job, row.event, row.key],
            True,
        )

    def sent(self, row: AlertRow, at: Time) -> None:
        """See :meth:`Ledger.sent`."""
        self._one(
            f"UPDATE {self._p}alerts SET sent = ? WHERE task_id = ? AND event = ? AND key = ?",
            [at, row.job, row.event, row.key],
            True,
        )

    def trim(self, before: Time | None, keep_runs: int | None, limit: int) -> int:
        """See :meth:`Ledger.trim`. Each statement scans what it deletes from: the
        outcomes' ranking reads every outcome (run it every few minutes, not per run)."""
        p, gone = self._p, 0
        if keep_runs is not None:
            gone += self._one(
                f"DELETE FROM {p}outcomes WHERE (task_id, slot, attempt, fence) IN (SELECT "
                "task_id, slot, attempt, fence FROM (SELECT task_id, slot, attempt, fence, "
                "row_number() OVER (PARTITION BY task_id ORDER BY slot DESC, attempt DESC, "
                f"fence DESC) AS n FROM {p}outcomes) ranked WHERE n > ? LIMIT ?)",
                [keep_runs, limit],
                True,
            )[1]
        if before is not None:
            for table in ("audit", "alerts"):
                key = "id" if table == "audit" else "task_id, event, key"
                gone += self._one(
                    f"DELETE FROM {p}{table} WHERE ({key}) IN (SELECT {key} FROM {p}{table} "
                    "WHERE at < ? LIMIT ?)",
                    [before, limit],
                    True,
                )[1]
        return gone


def _swap_sql(p: str, name: str, old: Any, new: Any) -> tuple[str, list[Any]]:
    """The statement of one compare-and-set of a setting (``old`` ``None``: unset)."""
    if old is None:
        return (
            f"INSERT INTO {p}meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
            [_key(name), json.dumps(new)],
        )
    return (
        f"UPDATE {p}meta SET value = ? WHERE key = ? AND value = ?",
        [json.dumps(new), _key(name), json.dumps(old)],
    )


def _key(name: str) -> str:
    """A setting's key in the meta table (apart from the store's own keys)."""
    return f"setting:{name}"


class MemoryLedger:
    """The ledger of a :class:`~rota.store.MemoryStore` (or of an in-memory scheduler's
    dashboard): the same rows, in this process. ``outcomes()`` is the store's outcomes
    by key as they are now, trimmed in place under ``lock`` (the store's)."""

    def __init__(
        self,
        lock: threading.Lock | None = None,
        outcomes: Callable[[], dict[tuple[str, Time, int, int], Any]] | None = None,
    ) -> None:
        self._lock = lock or threading.Lock()
        self._outcomes = outcomes or dict
        self._settings: dict[str, str] = {}
        self._audit: list[AuditRow] = []
        self._alerts: dict[tuple[str, str, str], tuple[AlertRow, str | None, Time]] = {}

    def setting(self, name: str) -> Any:
        """See :meth:`Ledger.setting`."""
        with self._lock:
            text = self._settings.get(name)
        return None if text is None else json.loads(text)

    def put_setting(self, name: str, value: Any) -> None:
        """See :meth:`Ledger.put_setting`."""
        with self._lock:
            if value is None:
                self._settings.pop(name, None)
            else:
                self._settings[name] = json.dumps(value)

    def settings(self, names: Sequence[str]) -> dict[str, Any]:
        """See :meth:`Ledger.settings`."""
        with self._lock:
            found = {n: self._settings[n] for n in names if n in self._settings}
        return {n: json.loads(text) for n, text in found.items()}

    def swap(self, name: str, old: Any, new: Any) -> bool:
        """See :meth:`Ledger.swap`."""
        return self.swaps([(name, old, new)])[0]

    def swaps(self, changes: Sequence[tuple[str, Any, Any]]) -> list[bool]:
        """See :meth:`Ledger.swaps`."""
        done = []
        with self._lock:
            for name, old, new in changes:
                same = self._settings.get(name) == (None if old is None else json.dumps(old))
                if same:
                    self._settings[name] = json.dumps(new)
                done.append(same)
        return done

    def audit(self, row: AuditRow) -> None:
        """See :meth:`Ledger.audit`."""
        with self._lock:
            self._audit.append(row)

    def audits(self, job: str | None, limit: int) -> list[AuditRow]:
        """See :meth:`Ledger.audits`. O(entries)."""
        with self._lock:
            found = [r for r in reversed(self._audit) if job is None or r.job == job]
        return found[:limit]

    def alert(self, row: AlertRow) -> bool:
        """See :meth:`Ledger.alert`."""
        with self._lock:
            if (row.job, row.event, row.key) in self._alerts:
                return False
            self._alerts[row.job, row.event, row.key] = (row, None, 0.0)
            return True

    def alerts(self, unsent: bool, limit: int) -> list[AlertRow]:
        """See :meth:`Ledger.alerts`. O(alerts log alerts)."""
        with self._lock:
            rows = [row for row, _, _ in self._alerts.values()]
        if unsent:
            return sorted((r for r in rows if r.sent is None), key=lambda r: r.at)[:limit]
        return sorted(rows, key=lambda r: r.at, reverse=True)[:limit]

    def take(self, row: AlertRow, node: str, until: Time, now: Time) -> bool:
        """See :meth:`Ledger.take`."""
        with self._lock:
            found = self._alerts.get((row.job, row.event, row.key))
            if found is None or found[0].sent is not None:
                return False
            if found[1] is not None and found[2] >= now:
                return False
            self._alerts[row.job, row.event, row.key] = (found[0], node, until)
            return True

    def release(self, row: AlertRow, until: Time) -> None:
        """See :meth:`Ledger.release`."""
        with self._lock:
            found = self._alerts.get((row.job, row.event, row.key))
            if found is not None:
                self._alerts[row.job, row.event, row.key] = (found[0], found[1], until)

    def sent(self, row: AlertRow, at: Time) -> None:
        """See :meth:`Ledger.sent`."""
        with self._lock:
            found = self._alerts.get((row.job, row.event, row.key))
            if found is not None:
                self._alerts[row.job, row.event, row.key] = (
                    found[0]._replace(sent=at),
                    *found[1:],
                )

    def trim(self, before: Time | None, keep_runs: int | None, limit: int) -> int:
        """See :meth:`Ledger.trim`. O(outcomes log outcomes)."""
        gone: list[Any] = []
        with self._lock:
            if keep_runs is not None:
                outcomes = self._outcomes()
                by_task: dict[str, list[tuple[str, Time, int, int]]] = {}
                for key in outcomes:
                    by_task.setdefault(key[0], []).append(key)
                for keys in by_task.values():
                    keys.sort(key=lambda k: (k[1], k[2], k[3]), reverse=True)
                    gone += keys[keep_runs:]
                gone = gone[:limit]
                for key in gone:
                    del outcomes[key]
            if before is not None:
                old = [i for i, r in enumerate(self._audit) if r.at < before][:limit]
                for i in reversed(old):
                    del self._audit[i]
                gone += old
                alerts = [k for k, (r, _, _) in self._alerts.items() if r.at < before][:limit]
                for k in alerts:
                    del self._alerts[k]
                gone += alerts
        return len(gone)
