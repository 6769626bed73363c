"""SQLiteStore's schema: its forward-only migration steps (as :mod:`._pgsql` holds
PostgresStore's)."""

from __future__ import annotations

from ._ledger import ledger_steps
from ._pools import pool_steps
from ._schema import renamed_actions_sql
from ._tags import tag_steps


def migrations(p: str) -> list[list[str]]:
    """The schema, as forward-only steps: step k takes version k to k + 1.

    Time columns have no declared type (BLOB affinity), so ints stay ints and
    floats stay floats: an ``at`` read back is the very number written.
    """
    return [
        [
            f"CREATE TABLE IF NOT EXISTS {p}meta (key TEXT PRIMARY KEY, value NOT NULL)",
            f"""CREATE TABLE {p}tasks (
                task_id     TEXT PRIMARY KEY,
                action      TEXT NOT NULL,
                spec        TEXT NOT NULL,
                state       TEXT NOT NULL,
                status      TEXT NOT NULL,
                paused      INTEGER NOT NULL DEFAULT 0,
                due,
                priority    INTEGER NOT NULL DEFAULT 0,
                seq         INTEGER NOT NULL,
                fence       INTEGER NOT NULL DEFAULT 0,
                owner       TEXT,
                lease_until,
                expiries    INTEGER NOT NULL DEFAULT 0,
                version     INTEGER NOT NULL DEFAULT 0
            )""",
            f"CREATE INDEX {p}due ON {p}tasks (due, priority, seq) "
            "WHERE status = 'scheduled' AND paused = 0",
            # Rows with an owner are the runs in flight (few): claims of expired leases,
            # heartbeats and wake-ups scan them all; one index less to write per run.
            f"CREATE INDEX {p}owner ON {p}tasks (owner) WHERE owner IS NOT NULL",
            f"""CREATE TABLE {p}outcomes (
                task_id  TEXT NOT NULL,
                slot     NOT NULL,
                attempt  INTEGER NOT NULL,
                fence    INTEGER NOT NULL,
                at       NOT NULL,
                result   TEXT NOT NULL,
                error    TEXT,
                started,
                finished NOT NULL,
                skipped  INTEGER NOT NULL DEFAULT 0,
                owner    TEXT,
                value    TEXT,
                PRIMARY KEY (task_id, slot, attempt, fence)
            ) WITHOUT ROWID""",
            f"INSERT OR IGNORE INTO {p}meta VALUES ('seq', 0)",
        ],
        [
            # Claims read each action's own range (see Known.actions): rows of actions a
            # node cannot run cost its claims nothing (they walked the due order past
            # them: 63 ms a claim beside 10^5 such rows)
            f"DROP INDEX IF EXISTS {p}due",
            f"CREATE INDEX {p}due_by_action ON {p}tasks (action, due, priority, seq) "
            "WHERE status = 'scheduled' AND paused = 0",
        ],
        [  # a run's skipped slots by reason (misfire, overlap, deadline), as JSON
            f"ALTER TABLE {p}outcomes ADD COLUMN skipped_by TEXT",
        ],
        [renamed_actions_sql(p)],  # the import package's name, rota since cadence
        [  # each node's heartbeat, for the nodes page: idle nodes listed, dead ones marked
            f"CREATE TABLE IF NOT EXISTS {p}nodes (node TEXT PRIMARY KEY, started NOT NULL, "
            "seen NOT NULL, lease NOT NULL)",
        ],
        [  # the runs that wait for an upstream (after=), woken when its runs end
            f"CREATE TABLE IF NOT EXISTS {p}waits (upstream TEXT NOT NULL, task_id TEXT NOT "
            "NULL, at NOT NULL, PRIMARY KEY (upstream, task_id)) WITHOUT ROWID",
            f"CREATE INDEX IF NOT EXISTS {p}waits_task ON {p}waits (task_id)",
        ],
        # the ledger (rota.store._ledger): settings in meta, the audit log, the alerts
        ledger_steps(p, "INTEGER PRIMARY KEY", "REAL"),
        [
            *pool_steps(p),
            *tag_steps(p, "sqlite"),
        ],  # each row's pool, each pool's size (rota.store._pools)
    ]
