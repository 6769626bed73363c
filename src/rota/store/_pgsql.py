"""PostgresStore's schema, its migration steps, its settings and the SQL text it
sends: what the store's class runs, apart from how it runs it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict

from rota._core.types import Time

from ._base import COLUMNS as _COLUMNS
from ._base import (
    FINISHED_NAMES,
    LEASED_SQL,
    RUN_COLUMNS,
    RUNNING,
    Edit,
    Known,
    OutcomeRow,
    logger,
    redacted,
    run_values,
)
from ._base import OUTCOME_COLUMNS as _OUTCOME_COLUMNS
from ._ledger import ledger_steps
from ._pools import open_sql, pool_steps
from ._schema import FORMER_PREFIX, former_tables, migrate, renamed_actions_sql
from ._tags import tag_steps

RETRIES = 5
"""Attempts of one transaction that hit a unique violation or a lost connection."""
LOCK_TIMEOUT = 5.0
"""Seconds a statement of rota's waits for a row lock (``lock_timeout``)."""
STATEMENT_TIMEOUT = 10.0
"""Seconds a statement of rota's may run (``statement_timeout``). In a pipeline (a
group commit with its claim) it spans every statement up to the pipeline's sync, so
it also bounds how long a node frozen mid-pipeline keeps its rows locked: below the
default lease (30 s)."""
IDLE_TIMEOUT = 10.0
"""Seconds the server lets a rota session sit idle inside a transaction (a frozen
node) before it ends it (``idle_in_transaction_session_timeout``): below the default
lease (30 s)."""
CANCELLED = (errors.QueryCanceled, errors.LockNotAvailable)
"""Statements the server cancelled: their transaction is rolled back, their
connection healthy."""
REMEASURE = 30.0
"""Seconds after which a node measures its clock's offset from the server's again."""
FAULT_POINTS = ("claim: results", "claim: synced", "completions: results",
                "completions: synced")  # fmt: skip
"""The points of a claim's and a completion's transaction where rows are locked and
the node waits for nothing but itself (see :meth:`PostgresStore._at`)."""
SOON = 1.0
"""A write whose new due time is within this many seconds notifies the other nodes."""


def _migrations(p: str) -> list[list[str]]:
    return [
        [
            f"""CREATE TABLE {p}tasks (
                task_id     text PRIMARY KEY,
                action      text NOT NULL,
                spec        text NOT NULL,
                state       text NOT NULL,
                status      text NOT NULL,
                paused      boolean NOT NULL DEFAULT false,
                due         numeric,
                priority    bigint NOT NULL DEFAULT 0,
                seq         bigint NOT NULL,
                fence       bigint NOT NULL DEFAULT 0,
                owner       text,
                lease_until numeric,
                expiries    integer NOT NULL DEFAULT 0,
                version     bigint NOT NULL DEFAULT 0
            )""",
            f"CREATE INDEX {p}due ON {p}tasks (due, priority, seq) "
            "WHERE status = 'scheduled' AND NOT paused",
            f"CREATE INDEX {p}owner ON {p}tasks (owner) WHERE owner IS NOT NULL",
            f"""CREATE TABLE {p}outcomes (
                task_id  text NOT NULL,
                slot     numeric NOT NULL,
                attempt  integer NOT NULL,
                fence    bigint NOT NULL,
                at       numeric NOT NULL,
                result   text NOT NULL,
                error    text,
                started  numeric,
                finished numeric NOT NULL,
                skipped  integer NOT NULL DEFAULT 0,
                owner    text,
                value    text,
                PRIMARY KEY (task_id, slot, attempt, fence)
            )""",
            f"CREATE SEQUENCE {p}seq",
        ],
        [  # claims read each action's own range (see Known.actions, and SQLite's step)
            f"DROP INDEX IF EXISTS {p}due",
            f"CREATE INDEX {p}due_by_action ON {p}tasks (action, due, priority, seq) "
            "WHERE status = 'scheduled' AND NOT paused",
        ],
        [  # a run's skipped slots by reason (see SQLite's step)
            f"ALTER TABLE {p}outcomes ADD COLUMN IF NOT EXISTS skipped_by text",
        ],
        [renamed_actions_sql(p)],  # the import package's name, rota since cadence
        [  # each node's heartbeat (see SQLite's step)
            f"CREATE TABLE IF NOT EXISTS {p}nodes (node text PRIMARY KEY, started numeric "
            "NOT NULL, seen numeric NOT NULL, lease numeric NOT NULL)",
        ],
        [  # the runs that wait for an upstream (see SQLite's step)
            f"CREATE TABLE IF NOT EXISTS {p}waits (upstream text NOT NULL, task_id text NOT "
            "NULL, at numeric NOT NULL, PRIMARY KEY (upstream, task_id))",
            f"CREATE INDEX IF NOT EXISTS {p}waits_task ON {p}waits (task_id)",
        ],
        ledger_steps(p, "bigserial PRIMARY KEY", "double precision"),  # (see SQLite's step)
        [*pool_steps(p), *tag_steps(p, "postgres")],  # (see SQLite's step)
    ]


def _exists(db: psycopg.Connection[Any], name: str) -> bool:
    """Whether a table (or any relation) of that name is on the search path."""
    found = db.execute("SELECT to_regclass(%s)", (name,)).fetchone()
    return found is not None and found[0] is not None


def _num(value: Time | None) -> Decimal | int | None:
    """A time as written: its exact text as a numeric (ints stay ints)."""
    if value is None or isinstance(value, int):
        return value
    return Decimal(repr(value))


def _time(value: Any) -> Any:
    """A numeric read back: an int if it was written as one, else the very float."""
    if isinstance(value, Decimal):
        return int(value) if value.as_tuple().exponent == 0 else float(value)
    return value


@functools.lru_cache(maxsize=8)
def _due_sql(p: str, column: str, *, claim: bool) -> str:
    """The earliest runs of a list of actions, each action through its own range of
    the action index (a ``LATERAL`` join), then the earliest of all in ``(due,
    priority, seq)`` order; ``column`` of each. Parameters: the actions, with
    ``claim`` ``now`` (only runs due by then, locked ``FOR UPDATE SKIP LOCKED``:
    rows an action's range locked beyond the limit stay locked only to the end of
    the statement's transaction), the refused ids, the limit per action, the
    limit."""
    bound, locking = ("AND due <= %s ", " FOR UPDATE SKIP LOCKED") if claim else ("", "")
    return (
        f"SELECT c.{column} FROM unnest(%s::text[]) AS n(action) CROSS JOIN LATERAL "
        f"(SELECT task_id, due, priority, seq FROM {p}tasks WHERE action = n.action "
        f"AND status = 'scheduled' AND NOT paused {bound}AND {open_sql(p)} "
        "AND NOT task_id = ANY(%s) ORDER BY due, priority, seq LIMIT %s"
        f"{locking}) c ORDER BY c.due, c.priority, c.seq LIMIT %s"
    )


def claim_due_sql(p: str) -> str:
    """The claim of the earliest due runs (:func:`_due_sql`'s parameters, then the
    node and the lease's end): leased, their fence moved on, returned."""
    return (
        f"WITH due_runs AS MATERIALIZED ({_due_sql(p, 'task_id', claim=True)}) "
        f"UPDATE {p}tasks t SET status = '{RUNNING}', owner = %s, lease_until = %s, "
        f"fence = t.fence + 1 FROM due_runs WHERE t.task_id = due_runs.task_id "
        f"RETURNING {_returning()}"
    )


def claim_expired_sql(p: str, where: str) -> str:
    """The claim of runs whose lease ran out (parameters: now, ``where``'s, the limit,
    the node and the lease's end): taken over, counted, returned."""
    return (
        f"WITH expired AS MATERIALIZED (SELECT task_id FROM {p}tasks "
        f"WHERE owner IS NOT NULL AND status IN {LEASED_SQL} "
        f"AND lease_until < %s AND {where} ORDER BY lease_until LIMIT %s "
        f"FOR UPDATE SKIP LOCKED) UPDATE {p}tasks t SET status = '{RUNNING}', owner = %s, "
        "lease_until = %s, fence = t.fence + 1, expiries = t.expiries + 1 "
        f"FROM expired WHERE t.task_id = expired.task_id RETURNING {_returning()}"
    )


def _outcome_values(o: OutcomeRow) -> tuple[Any, ...]:
    return (o.task_id, _num(o.slot), o.attempt, o.fence, _num(o.at), o.result, o.error,
            _num(o.started), _num(o.finished), o.skipped, o.owner, o.value,
            o.skipped_by)  # fmt: skip


def _expected_params(edit: Edit) -> tuple[Any, ...] | None:
    """The parameters of :func:`_expected` for a completion decided in advance
    (``None`` for any other edit)."""
    task_id, _, fence, expect = edit
    if expect is None or expect[1].outcome is None:
        return None
    version, decided = expect
    new, outcome = decided.row, decided.outcome
    assert new is not None
    assert outcome is not None
    new.version = version + 1
    state, status, due, _, owner, until, expiries, version_ = run_values(new, _num)
    return (state, status, due, decided.requeued, owner, until, expiries, version_, task_id,
            fence, version, *_outcome_values(outcome))  # fmt: skip


@functools.lru_cache(maxsize=16)
def _expected(p: str) -> str:
    """The completion decided in advance: a conditional UPDATE (a new ``seq`` if the run
    was queued anew) and the outcome's INSERT, which happens only if the UPDATE did."""
    names = [name.strip() for name in RUN_COLUMNS.split(",")]  # the run's, nothing else
    sets = ", ".join(
        f"{n} = CASE WHEN %s THEN nextval('{p}seq') ELSE {p}tasks.seq END" if n == "seq"
        else f"{n} = %s"
        for n in names
    )  # fmt: skip
    marks = ",".join(["%s"] * len(_OUTCOME_COLUMNS.split(",")))
    return (
        f"WITH u AS (UPDATE {p}tasks SET {sets} WHERE task_id = %s AND fence = %s "
        f"AND version = %s RETURNING seq) INSERT INTO {p}outcomes ({_OUTCOME_COLUMNS}) "
        f"SELECT {marks} FROM u RETURNING (SELECT seq FROM u)"
    )


@functools.lru_cache(maxsize=16)
def _returning() -> str:
    return ", ".join(f"t.{name.strip()}" for name in _COLUMNS.split(","))


def recorded_in(db: psycopg.Connection[Any], prefix: str, outcome: OutcomeRow) -> bool:
    """Whether ``outcome`` is stored (by its key: task, slot, attempt, fence): one read."""
    found = db.execute(
        f"SELECT 1 FROM {prefix}outcomes WHERE task_id = %s AND slot = %s AND attempt = %s "
        "AND fence = %s",
        (outcome.task_id, _num(outcome.slot), outcome.attempt, outcome.fence),
    ).fetchone()
    return found is not None


def _known(known: Known) -> tuple[str, list[Any]]:
    """The SQL condition for "a run this node may claim" (:class:`Known`), and its
    parameters."""
    paths, path_params = known.paths_sql("%s")
    sql = f"(action = ANY(%s) OR (strpos(action, ':') > 0 AND NOT action = ANY(%s) AND {paths}))"
    params: list[Any] = [list(known.names), list(known.broken), *path_params]
    if known.refused:
        sql += " AND NOT task_id = ANY(%s)"
        params.append(list(known.refused))
    return sql, params


def stored_version(db: psycopg.Connection[Any], prefix: str) -> tuple[int | None, bool]:
    """The schema version stored under ``prefix`` (``None``: no store yet), and whether
    a store of the former name awaits renaming. One or two catalogue reads."""
    p = prefix
    if not _exists(db, f"{p}meta"):  # a new store (no error in the server log)
        return None, bool(former_tables(p, lambda name: _exists(db, name)))
    found = db.execute(f"SELECT value FROM {p}meta WHERE key = 'schema_version'").fetchone()
    return (None if found is None else int(found[0])), False


def upgrade(db: psycopg.Connection[Any], prefix: str, steps: list[list[str]], where: str) -> None:
    """Create or migrate the schema under ``prefix`` in ``db``'s transaction, under an
    advisory lock (nodes starting together migrate once), renaming a store of the
    former name first. Raises :class:`StoreError` for a newer schema."""
    p = prefix
    db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{p}schema",))
    adopt_former(db, p, where)
    db.execute(f"CREATE TABLE IF NOT EXISTS {p}meta (key text PRIMARY KEY, value text)")
    found = db.execute(f"SELECT value FROM {p}meta WHERE key = 'schema_version'").fetchone()
    version = 0 if found is None else int(found[0])
    latest = migrate(version, steps, db.execute, where)
    db.execute(
        f"INSERT INTO {p}meta VALUES ('schema_version', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(latest),),
    )


def adopt_former(db: psycopg.Connection[Any], prefix: str, where: str) -> None:
    """Rename a store written before the project's rename (see
    :func:`~rota.store._schema.former_tables`) in ``db``'s transaction: its tables,
    its sequence, and every index of its tables (primary keys included) that
    bears the former prefix."""
    renames = former_tables(prefix, lambda name: _exists(db, name))
    if not renames:
        return
    for old, new in renames:
        db.execute(f"ALTER TABLE {old} RENAME TO {new}")
    db.execute(f"ALTER SEQUENCE IF EXISTS {FORMER_PREFIX}seq RENAME TO {prefix}seq")
    indexes = db.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = ANY(%s) AND starts_with(indexname, %s)",
        ([new for _, new in renames], FORMER_PREFIX),
    ).fetchall()
    for (name,) in indexes:
        db.execute(f"ALTER INDEX {name} RENAME TO {prefix}{name[len(FORMER_PREFIX) :]}")
    logger.warning(
        "%s: renamed the tables of rota's former name (%s*) to %s*", where, FORMER_PREFIX, prefix
    )


def shown_url(conninfo: str) -> str:
    """A connection string as ``--store`` names it, its password hidden:
    ``postgresql://app@db:5432/app`` (a ``key=value`` string is shown as that URL too;
    one psycopg cannot parse, redacted as it is). O(len)."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        return redacted(conninfo)
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return redacted(conninfo)
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def end_stalled_in(db: psycopg.Connection[Any], prefix: str, older_than: float) -> list[int]:
    """End the backends of this database whose transaction began over ``older_than``
    seconds ago and holds a lock on the tasks under ``prefix`` (a claim or a
    completion, never a reader's snapshot); the pids ended. See
    :meth:`PostgresStore.end_stalled`."""
    found = db.execute(
        "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a "
        "WHERE a.pid <> pg_backend_pid() AND a.datname = current_database() "
        "AND a.xact_start < clock_timestamp() - make_interval(secs => %s) "
        "AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted "
        "AND l.relation = to_regclass(%s) "
        "AND l.mode IN ('RowExclusiveLock', 'RowShareLock'))",
        (older_than, f"{prefix}tasks"),
    ).fetchall()
    return [pid for pid, ended in found if ended]


def prune_in(db: psycopg.Connection[Any], prefix: str, before: Time, limit: int) -> int:
    """One transaction of :meth:`PostgresStore.prune`: nodes unseen since ``before``, up
    to ``limit`` outcomes finished before it, then up to ``limit`` finished tasks due
    before it with no outcome left; how many rows went."""
    p = prefix
    db.execute(f"DELETE FROM {p}nodes WHERE seen < %s", (_num(before),))
    gone: int = db.execute(
        f"DELETE FROM {p}outcomes WHERE ctid = ANY(ARRAY(SELECT ctid FROM {p}outcomes "
        "WHERE finished < %s LIMIT %s))",
        (_num(before), limit),
    ).rowcount
    gone += db.execute(
        f"DELETE FROM {p}tasks WHERE ctid = ANY(ARRAY(SELECT ctid FROM {p}tasks t "
        f"WHERE status = ANY(%s) AND due < %s AND NOT EXISTS "
        f"(SELECT 1 FROM {p}outcomes o WHERE o.task_id = t.task_id) LIMIT %s))",
        (FINISHED_NAMES, _num(before), limit),
    ).rowcount
    return gone


def session_settings(
    lock_timeout: float | None, statement_timeout: float | None, idle_timeout: float | None
) -> str:
    """The ``SET`` statements a new connection runs for the given timeouts (seconds,
    ``None``: the server's). Raises ``ValueError`` naming a timeout that is not a
    positive number or ``None``."""
    settings = {
        "lock_timeout": lock_timeout,
        "statement_timeout": statement_timeout,
        "idle_in_transaction_session_timeout": idle_timeout,
    }
    for name, value in (("lock_timeout", lock_timeout),
                        ("statement_timeout", statement_timeout),
                        ("idle_timeout", idle_timeout)):  # fmt: skip
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
        ):
            raise ValueError(f"{name} must be a positive number of seconds or None, "
                             f"got {value!r}")  # fmt: skip
    return "".join(
        f"SET {name} = {max(1, round(value * 1000))}; "
        for name, value in settings.items()
        if value is not None
    )


def ledger_run(
    retrying: Callable[..., Any], statements: Sequence[tuple[str, Sequence[Any]]], write: bool
) -> list[tuple[list[tuple[Any, ...]], int]]:
    """Statements of the ledger (:data:`rota.store._ledger.Run`) through a store's
    ``retrying``: writes in one transaction, reads without one."""

    def work(db: psycopg.Connection[Any]) -> list[tuple[list[tuple[Any, ...]], int]]:
        done = []
        for sql, params in statements:
            cursor = db.execute(sql.replace("?", "%s"), params)
            done.append(((cursor.fetchall() if cursor.description else []), cursor.rowcount))
        return done

    result: list[tuple[list[tuple[Any, ...]], int]] = retrying(work, transaction=write)
    return result
