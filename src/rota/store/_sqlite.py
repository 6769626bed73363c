"""SQLiteStore: the embedded default store (standard library ``sqlite3``, no server).

Durability: WAL journal, ``synchronous=FULL`` by default (a committed write
survives power loss; ``NORMAL`` is an opt-in that may lose the last
commits on power loss, never on a process crash), every write in a
``BEGIN IMMEDIATE`` transaction (one writer at a time, no upgrade
deadlocks), a busy timeout, and a retry of the rare ``database is locked``
left after it, so that error never reaches users. Several processes on one
host may share the file; it must be on a local filesystem (WAL needs shared
memory).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from rota._core.types import StoreError, Time

from ._base import COLUMNS as _COLUMNS
from ._base import (
    FINISHED_SQL,
    LEASED_SQL,
    RUN_COLUMNS,
    RUNNING,
    Change,
    Edit,
    Known,
    Listed,
    NodeRow,
    OutcomeRow,
    StoreBase,
    T,
    TaskRow,
    actions_sql,
    ahead,
    claimed_rows,
    logger,
    outcome_from,
    run_values,
    task_row,
)
from ._base import OUTCOME_COLUMNS as _OUTCOME_COLUMNS
from ._ledger import SqlLedger
from ._pools import full_sql, pool_use, pools_sql, settle
from ._schema import (
    DEFAULT_PREFIX,
    FORMER_PREFIX,
    former_tables,
    is_current,
    migrate,
)
from ._sqlitesql import migrations
from ._tags import tagged_sql
from ._waits import ended_rows, ended_sql, sync_waits, wakes
from ._write import write_row

BUSY_TIMEOUT = 30.0
"""Seconds a connection waits for the write lock before SQLite reports it busy."""

STALL = 0.05
"""Seconds of waiting for the write lock that make a stall: leases written after it
run from its end (see :meth:`SQLiteStore._until`)."""

LOCKED_RETRY = 120.0
"""Seconds a write keeps retrying past the busy timeout before the error propagates."""


class SQLiteStore(StoreBase):
    """A :class:`~rota.store.Store` in one SQLite file.

    ``path`` is the database file (created if missing; ``":memory:"`` is
    refused: each connection would see its own database). ``synchronous``
    is ``"FULL"`` (default: durable across power loss) or ``"NORMAL"``
    (faster; a power loss may lose the last commits). ``prefix`` names the
    tables (``rota_tasks``, ``rota_outcomes``, ``rota_meta`` by
    default), so several schedules can share one file. A file written before the
    project's rename (tables ``cadence_*``) is opened with the default prefix by
    renaming them (see :meth:`open`).

    Thread-safe: each thread gets its own connection. Costs: one
    transaction (and, with ``FULL``, one fsync) per write; :meth:`claim` and
    :meth:`next_due` read only the earliest rows through an index, so they
    do not grow with the number of stored tasks.

    Raises ``TypeError``/``ValueError`` for bad arguments, and
    :class:`StoreError` from :meth:`open` for a schema newer than this code.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        prefix: str = DEFAULT_PREFIX,
        create: bool = True,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or path, got {path!r}")
        path = os.fspath(path)
        if path in {":memory:", ""}:
            raise ValueError(f"path must name a file, got {path!r}: use MemoryStore instead")
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if not isinstance(prefix, str) or not prefix.replace("_", "a").isalnum():
            raise ValueError(f"prefix must be letters, digits and underscores, got {prefix!r}")
        super().__init__()
        self.path = path
        self.synchronous = synchronous
        self._p = prefix
        self._create = create
        # This process's writers queue here, not in SQLite's busy handler, which
        # sleeps (up to 100 ms a time) between tries: threads hand the write lock
        # over at once; other processes still wait through the busy timeout.
        self._writer = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, synchronous={self.synchronous!r})"

    @property
    def url(self) -> str:
        """The store as ``--store`` names it: ``sqlite:////absolute/path.db``. O(1)."""
        return f"sqlite:///{os.path.abspath(self.path)}"

    # -- connections -----------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            _create_private(self.path)
            db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            # Turning a new file to WAL needs it alone: SQLite reports another process's
            # write transaction at once here, without waiting out the busy timeout
            _while_busy(db, "PRAGMA journal_mode=WAL", time.monotonic() + LOCKED_RETRY)
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.db = self._opened(db)
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed, or rolled back on error;
        one at a time in this process."""
        db = self._db()
        asked = time.monotonic()
        with self._writer:
            deadline = asked + LOCKED_RETRY
            _while_busy(db, "BEGIN IMMEDIATE", deadline)
            # The callers' `now` was read before the wait for the write lock (another
            # process's long write, a VACUUM, a sqlite3 shell): a lease written in this
            # transaction runs from now, not from then (see _until)
            self._local.waited = time.monotonic() - asked
            try:
                yield db
                _while_busy(db, "COMMIT", deadline)
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _until(self, db: sqlite3.Connection, now: Time, lease: Time) -> Time:
        """The end of a lease written in this thread's write transaction (``db``'s):
        ``lease`` after ``now``, plus the time the transaction waited for the write
        lock if that was a stall (:data:`STALL` or more; shorter waits are left out,
        so leases on a test's manual clock stay exact).

        A stall (a long write elsewhere, a ``VACUUM``, a ``sqlite3`` shell) is nobody's
        fault, but no heartbeat could renew a lease during it: so every lease live
        within one ``lease`` before this wait began (the stall may have begun before
        it: this node may have waited only from a lease's expiry, its wake-up time) is
        given a full lease from its end too (one UPDATE of the runs in flight, after a
        stall only). Otherwise a node that got the lock before the holder's waiting
        heartbeat would take over a healthy run. The cost: after a stall, a dead
        holder's run is taken over up to a stall and a lease later."""
        waited: float = self._local.waited
        if waited < STALL:
            return now + lease
        until = now + lease + waited
        db.execute(
            f"UPDATE {self._p}tasks SET lease_until = max(lease_until, ?) WHERE owner IS NOT "
            f"NULL AND status IN {LEASED_SQL} AND lease_until >= ?",
            (until, now - lease),
        )
        return until

    def open(self) -> None:
        """Create the schema, or migrate an older one forward, in one transaction; a
        current schema is only read (no write lock: read-only users and commands can
        open the file while another process holds the write lock).

        A file written before the project's rename (tables ``cadence_*``, opened
        with the default prefix) has its tables and indexes renamed in that same
        transaction, and its stored import paths rewritten (schema step 4).

        Raises :class:`StoreError` for a schema newer than this code (rows are
        never deleted or rewritten to make them fit).
        """
        p = self._p
        steps = migrations(p)
        if not self._create and not os.path.exists(self.path):
            raise StoreError(f"no store at {os.path.abspath(self.path)} (nothing was created)")
        try:  # current already (the usual case): a read, no write lock, no write access
            found = (
                self._db()
                .execute(f"SELECT value FROM {p}meta WHERE key = 'schema_version'")
                .fetchone()
            )
        except sqlite3.OperationalError as exc:  # no such table yet: a new file
            if "no such table" not in str(exc):
                raise
            found = None
        if is_current(None if found is None else int(found[0]), steps, self.path):
            return
        if not self._create and found is None and not former_tables(p, self._has_table):
            raise StoreError(f"{os.path.abspath(self.path)} holds no rota store")
        with self._write() as db:
            self._adopt_former(db)
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {p}meta (key TEXT PRIMARY KEY, value NOT NULL)"
            )
            found = db.execute(
                f"SELECT value FROM {p}meta WHERE key = 'schema_version'"
            ).fetchone()
            version = 0 if found is None else int(found[0])
            latest = migrate(version, steps, db.execute, self.path)
            db.execute(f"INSERT OR REPLACE INTO {p}meta VALUES ('schema_version', ?)", (latest,))

    def _has_table(self, name: str) -> bool:
        found = self._db().execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        )
        return found.fetchone() is not None

    def _adopt_former(self, db: sqlite3.Connection) -> None:
        """Rename a store written before the project's rename (see
        :func:`~rota.store._base.former_tables`), in ``db``'s write transaction:
        its tables, then its indexes, which SQLite cannot rename: each is made again
        under its new name from its SQL (which the table renames already pointed at
        the new tables), and the old one dropped."""
        renames = former_tables(self._p, self._has_table)
        if not renames:
            return
        for old, new in renames:
            db.execute(f"ALTER TABLE {old} RENAME TO {new}")
        tables = [new for _, new in renames]
        indexes = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            f"AND tbl_name IN ({', '.join('?' * len(tables))})",
            tables,
        ).fetchall()
        for name, sql in indexes:
            if name.startswith(FORMER_PREFIX):
                db.execute(f"DROP INDEX {name}")
                db.execute(sql.replace(name, self._p + name[len(FORMER_PREFIX) :], 1))
        logger.warning(
            "%s: renamed the tables of rota's former name (%s*) to %s*",
            os.path.abspath(self.path),
            FORMER_PREFIX,
            self._p,
        )

    # -- the protocol ----------------------------------------------------

    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """See :meth:`rota.store.Store.modify_many`."""
        with self._write() as db:
            return self._modify_in(db, edits)

    def _modify_in(
        self, db: sqlite3.Connection, edits: Sequence[Edit]
    ) -> list[Change[Any] | None]:
        """:meth:`modify_many`'s work, in ``db``'s transaction."""
        p = self._p
        results: list[Change[Any] | None] = []
        written = self._write_expected(db, edits)
        for (task_id, change, fence, expect), done in zip(edits, written, strict=True):
            if done:
                assert expect is not None
                results.append(expect[1])
                continue
            found = db.execute(
                f"SELECT {_COLUMNS} FROM {p}tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
            row = None if found is None else task_row(found)
            if fence is not None and (row is None or row.fence != fence):
                results.append(None)
                continue
            before = None if row is None else row.spec  # (a decision may replace it)
            decided = change(row)
            new = decided.row
            if new is not None:
                new.version = 0 if row is None else row.version + 1
                self._seq(db, decided)
                write_row(db.execute, f"{p}tasks", new, row, "?", before=before)
            self._record(db, decided)
            results.append(decided)
        sync_waits(db.execute, p, "?", *wakes(results))
        return results

    def _write_expected(self, db: sqlite3.Connection, edits: Sequence[Edit]) -> list[bool]:
        """Write every change decided in advance (:attr:`Edit.expect`) whose row is still
        at its expected version and fence, and record their outcomes: one UPDATE and one
        INSERT per :func:`_pieces` of them. Whether each edit was written.

        The edits of a task edited more than once are left to the caller's
        read-and-decide path (see :func:`~rota.store._base.ahead`). The ``seq`` values
        of the runs queued anew are taken at once (unused ones leave gaps:
        only their order matters). O(len(edits)).
        """
        sent = ahead(edits)
        mine = [
            (e.task_id, e.fence, *e.expect)
            for e, first in zip(edits, sent, strict=True)
            if first and e.expect is not None
        ]
        seqs = iter(self._seqs(db, sum(1 for *_, decided in mine if decided.requeued)))
        written: set[str] = set()
        for piece in _pieces(mine):
            params: list[Any] = []
            for task_id, fence, version, decided in piece:
                new = decided.row
                assert new is not None
                new.version = version + 1
                if decided.requeued:
                    new.seq = next(seqs)
                state, status, due, seq, owner, until, expiries, next_version = run_values(new)
                params += (
                    task_id, fence, version, state, status, NULL if due is None else due, seq,
                    NULL if owner is None else owner, NULL if until is None else until,
                    expiries, next_version,
                )  # fmt: skip
            found = db.execute(_expected_sql(self._p, len(piece)), params).fetchall()
            written.update(task_id for (task_id,) in found)
        outcomes = [
            decided.outcome
            for task_id, *_, decided in mine
            if task_id in written and decided.outcome is not None
        ]
        for recorded in _pieces(outcomes):
            db.execute(
                _outcomes_sql(self._p, len(recorded)),
                [NULL if value is None else value for outcome in recorded for value in outcome],
            )
        return [first and e.task_id in written for e, first in zip(edits, sent, strict=True)]

    def _seqs(self, db: sqlite3.Connection, n: int) -> range:
        """``n`` new, increasing ``seq`` values (one statement)."""
        if not n:
            return range(0)
        end = db.execute(
            f"UPDATE {self._p}meta SET value = value + ? WHERE key = 'seq' RETURNING value", (n,)
        ).fetchone()[0]
        return range(end - n + 1, end + 1)

    def _seq(self, db: sqlite3.Connection, decided: Change[Any]) -> None:
        """A new ``seq`` for a row whose run was queued anew (or that is new)."""
        new = decided.row
        if new is not None and (decided.requeued or new.seq == 0):
            new.seq = self._seqs(db, 1)[0]

    def _record(self, db: sqlite3.Connection, decided: Change[Any]) -> None:
        if decided.outcome is not None:
            db.execute(_outcomes_sql(self._p, 1), decided.outcome)

    def claim(self, node: str, now: Time, limit: int, lease: Time, known: Known) -> list[TaskRow]:
        """See :meth:`rota.store.Store.claim`."""
        with self._write() as db:
            return self._claim_in(db, node, now, limit, lease, known)

    def complete_and_claim(
        self, edits: Sequence[Edit], node: str, now: Time, limit: int, lease: Time, known: Known
    ) -> tuple[list[Change[Any] | None], list[TaskRow]]:
        """See :meth:`rota.store.Store.complete_and_claim`: one ``BEGIN IMMEDIATE``
        transaction, one commit (with ``FULL``, one fsync)."""
        with self._write() as db:
            return self._modify_in(db, edits), self._claim_in(db, node, now, limit, lease, known)

    def _claim_in(
        self, db: sqlite3.Connection, node: str, now: Time, limit: int, lease: Time, known: Known
    ) -> list[TaskRow]:
        """:meth:`claim`'s statements, in ``db``'s transaction: the rows they leased
        (:func:`~rota.store._base.claimed_rows`), due ones beyond their pools' places
        given back (:func:`~rota.store._pools.settle`)."""
        p = self._p
        where, params = _known(known)
        until = self._until(db, now, lease)
        actions = known.actions(lambda: self._stored_actions(db))
        refused = list(known.refused)
        full = [name for (name,) in db.execute(full_sql(p))]
        due = (
            db.execute(
                f"UPDATE {p}tasks SET status = '{RUNNING}', owner = ?, lease_until = ?, "
                f"fence = fence + 1 WHERE task_id IN (SELECT task_id FROM "
                f"({_due_sql(p, len(actions), len(refused), len(full))})) "
                f"RETURNING {_COLUMNS}",
                (node, until, *_due_params(actions, now, refused, limit, full), limit),
            ).fetchall()
            if actions
            else []
        )
        expired = (
            []
            if len(due) >= limit
            else db.execute(
                f"UPDATE {p}tasks SET status = '{RUNNING}', owner = ?, lease_until = ?, "
                f"fence = fence + 1, expiries = expiries + 1 WHERE task_id IN "
                f"(SELECT task_id FROM {p}tasks WHERE owner IS NOT NULL "
                f"AND status IN {LEASED_SQL} AND lease_until < ? AND {where} "
                "ORDER BY lease_until LIMIT ?) "
                f"RETURNING {_COLUMNS}",
                (node, until, now, *params, limit - len(due)),
            ).fetchall()
        )
        rows = claimed_rows(due, expired)
        given = settle(db.execute, p, "?", rows, lock=False)
        return [row for row in rows if row.task_id not in given] if given else rows

    def heartbeat(
        self, node: str, now: Time, lease: Time, held: Collection[str]
    ) -> dict[str, tuple[int, str]]:
        """See :meth:`rota.store.Store.heartbeat`: one transaction, one UPDATE per
        :func:`_pieces` of the runs held."""
        p = self._p
        ids = list(held)
        owned: dict[str, tuple[int, str]] = {}
        with self._write() as db:
            until = self._until(db, now, lease)
            for piece in _pieces(ids):
                found = db.execute(
                    f"UPDATE {p}tasks SET lease_until = CASE WHEN status IN {LEASED_SQL} "
                    "THEN ? ELSE lease_until END WHERE owner = ? AND task_id IN "
                    f"({','.join('?' * len(piece))}) RETURNING task_id, fence, status",
                    (until, node, *piece),
                ).fetchall()
                owned.update((task_id, (fence, status)) for task_id, fence, status in found)
        return owned

    def shift_leases(self, beyond: Time, by: Time) -> int:
        """See :meth:`rota.store.Store.shift_leases`: one UPDATE of the runs in
        flight (the owner index)."""
        with self._write() as db:
            done: int = db.execute(
                f"UPDATE {self._p}tasks SET lease_until = lease_until - ? WHERE owner IS NOT "
                f"NULL AND status IN {LEASED_SQL} AND lease_until > ?",
                (by, beyond),
            ).rowcount
        return done

    def next_due(self, node: str, known: Known, *, own: bool = False) -> Time | None:
        """See :meth:`rota.store.Store.next_due`."""
        p = self._p
        where, params = _known(known)
        db = self._db()
        actions = known.actions(lambda: self._stored_actions(db))
        refused = list(known.refused)
        full = [name for (name,) in db.execute(full_sql(p))]
        due = (
            db.execute(
                f"SELECT min(due) FROM ({_due_sql(p, len(actions), len(refused), len(full))})",
                (*_due_params(actions, None, refused, 1, full), 1),
            ).fetchone()
            if actions
            else None
        )
        if due is not None and due[0] is None:
            due = None
        lease = db.execute(
            f"SELECT lease_until FROM {p}tasks WHERE owner IS NOT NULL AND (? OR owner != ?) "
            f"AND status IN {LEASED_SQL} AND {where} ORDER BY lease_until LIMIT 1",
            (own, node, *params),
        ).fetchone()
        times = [found[0] for found in (due, lease) if found is not None]
        return min(times, default=None)

    def tagged(self, tag: str) -> list[str]:
        """See :meth:`rota.store.Store.tagged`."""
        return [task_id for (task_id,) in self._db().execute(tagged_sql(self._p, "?"), (tag,))]

    def pools(self) -> dict[str, tuple[int, int]]:
        """See :meth:`rota.store.Store.pools`."""
        return pool_use(self._db().execute(pools_sql(self._p)))

    def _stored_actions(self, db: sqlite3.Connection) -> list[str]:
        """The distinct actions of the claimable rows: a loose scan of the action index
        (one seek per action, whatever the rows)."""
        found = db.execute(actions_sql(f"{self._p}tasks", "status = 'scheduled' AND paused = 0"))
        return [action for (action,) in found.fetchall()]

    def get(self, task_id: str) -> TaskRow | None:
        """See :meth:`rota.store.Store.get`."""
        found = (
            self._db()
            .execute(f"SELECT {_COLUMNS} FROM {self._p}tasks WHERE task_id = ?", (task_id,))
            .fetchone()
        )
        return None if found is None else task_row(found, lenient=True)

    def actions(self) -> set[str]:
        """See :meth:`rota.store.Store.actions`: a loose scan of the action index,
        and the runs in flight (the owner index)."""
        db = self._db()
        flying = db.execute(
            f"SELECT DISTINCT action FROM {self._p}tasks WHERE owner IS NOT NULL "
            f"AND status IN {LEASED_SQL}"
        )
        return {*self._stored_actions(db), *(action for (action,) in flying.fetchall())}

    def rows(self) -> list[TaskRow]:
        """See :meth:`rota.store.Store.rows`."""
        found = self._db().execute(f"SELECT {_COLUMNS} FROM {self._p}tasks ORDER BY task_id")
        return [task_row(r, lenient=True) for r in found.fetchall()]

    def page(
        self, after: str | None = None, limit: int | None = None, *, unfinished: bool = False
    ) -> list[Listed]:
        """See :meth:`rota.store.Store.page`: one query; each latest outcome is one
        seek of the outcomes' key."""
        p = self._p
        found = self._db().execute(
            f"SELECT {_prefixed('t', _COLUMNS)}, {_prefixed('o', _OUTCOME_COLUMNS)} "
            f"FROM {p}tasks t LEFT JOIN {p}outcomes o ON o.task_id = t.task_id AND "
            f"(o.slot, o.attempt, o.fence) = (SELECT slot, attempt, fence FROM {p}outcomes "
            "WHERE task_id = t.task_id ORDER BY slot DESC, attempt DESC, fence DESC LIMIT 1) "
            f"WHERE (? IS NULL OR t.task_id > ?) AND NOT (? AND t.status IN {FINISHED_SQL}) "
            "ORDER BY t.task_id LIMIT ?",
            (after, after, unfinished, -1 if limit is None else limit),
        )
        width = len(_COLUMNS.split(","))
        return [
            Listed(task_row(r[:width], lenient=True), outcome_from(r[width:]))
            for r in found.fetchall()
        ]

    def outcomes(self, task_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`rota.store.Store.outcomes`."""
        found = self._db().execute(
            f"SELECT {_OUTCOME_COLUMNS} FROM {self._p}outcomes WHERE task_id = ? "
            "ORDER BY slot DESC, attempt DESC, fence DESC LIMIT ?",
            (task_id, limit),
        )
        return [OutcomeRow(*r) for r in found.fetchall()]

    def recorded(self, task_id: str, start: Time, end: Time) -> set[Time]:
        """See :meth:`rota.store.Store.recorded`."""
        found = self._db().execute(
            f"SELECT DISTINCT slot FROM {self._p}outcomes WHERE task_id = ? AND slot >= ? "
            "AND slot < ?",
            (task_id, start, end),
        )
        return {slot for (slot,) in found.fetchall()}

    def ended(self, task_id: str, start: Time, end: Time) -> tuple[dict[Time, str], Time | None]:
        """See :meth:`rota.store.Store.ended`: one query over the task's index range."""
        found = self._db().execute(ended_sql(self._p, "?"), (task_id, start, end, task_id))
        return ended_rows(found.fetchall(), start, end)

    def beat(self, node: str, now: Time, lease: Time) -> None:
        """See :meth:`rota.store.Store.beat`."""
        with self._write() as db:
            db.execute(
                f"INSERT INTO {self._p}nodes VALUES (?, ?, ?, ?) ON CONFLICT (node) DO UPDATE "
                "SET seen = excluded.seen, lease = excluded.lease",
                (node, now, now, lease),
            )

    def nodes(self) -> list[NodeRow]:
        """See :meth:`rota.store.Store.nodes`."""
        found = self._db().execute(f"SELECT * FROM {self._p}nodes ORDER BY node").fetchall()
        return [NodeRow(*row) for row in found]

    def prune(self, before: Time, limit: int) -> int:
        """See :meth:`rota.store.Store.prune`."""
        p = self._p
        with self._write() as db:
            db.execute(f"DELETE FROM {p}nodes WHERE seen < ?", (before,))
            gone: int = db.execute(
                f"DELETE FROM {p}outcomes WHERE (task_id, slot, attempt, fence) IN "
                f"(SELECT task_id, slot, attempt, fence FROM {p}outcomes WHERE finished < ? "
                "LIMIT ?)",
                (before, limit),
            ).rowcount
            gone += db.execute(
                f"DELETE FROM {p}tasks WHERE task_id IN (SELECT task_id FROM {p}tasks t "
                f"WHERE status IN {FINISHED_SQL} AND due < ? AND NOT EXISTS "
                f"(SELECT 1 FROM {p}outcomes o WHERE o.task_id = t.task_id) LIMIT ?)",
                (before, limit),
            ).rowcount
        return gone

    @property
    def ledger(self) -> SqlLedger:
        """See :attr:`rota.store.Store.ledger`."""
        return SqlLedger(self._p, self._ledger_run)

    def _ledger_run(
        self, statements: Sequence[tuple[str, Sequence[Any]]], write: bool
    ) -> list[tuple[list[tuple[Any, ...]], int]]:
        if not write:
            db = self._db()
            return [(db.execute(sql, params).fetchall(), -1) for sql, params in statements]
        with self._write() as db:
            done = []
            for sql, params in statements:
                cursor = db.execute(sql, params)
                done.append((cursor.fetchall(), cursor.rowcount))
            return done

    def changes(self, wait: float = 0.0) -> int:
        """``PRAGMA data_version`` of this thread's connection: moves when others commit.

        Polled: returns at once, whatever ``wait``.
        """
        return int(self._db().execute("PRAGMA data_version").fetchone()[0])

    def now(self) -> None:
        """``None``: processes sharing a SQLite file share the host's clock."""
        return


NULL = math.nan
"""What the hot statements bind for SQL ``NULL``: SQLite stores a NaN bound as a
parameter as ``NULL`` (``sqlite3VdbeMemSetDouble``; ``tests/durable`` checks it), and
``sqlite3`` binds an exact float as it is, while it binds ``None`` only after looking
for an adapter for it, which raises and clears an ``AttributeError`` each time (about
3,200 instructions a value; five a completion)."""

CHUNK = 256
"""The most rows one statement of :meth:`SQLiteStore._write_expected` or
:meth:`SQLiteStore.heartbeat` writes (SQLite allows 32,766 parameters a statement)."""
OUTCOME_WIDTH = len(_OUTCOME_COLUMNS.split(","))


def _pieces(rows: Sequence[T]) -> Iterator[Sequence[T]]:
    """``rows`` in consecutive pieces whose sizes are powers of two, largest first, at
    most :data:`CHUNK` (37 rows: 32, 4, 1). O(len(rows)).

    A statement's text grows with its rows, and each new text is parsed and planned
    anew (half a millisecond for the two statements of a group commit of 115 runs,
    measured); batch sizes follow the runners' pace, so they vary. In powers of two,
    a store writes with at most nine texts of each statement, which ``sqlite3``'s
    cache of 128 prepared statements a connection keeps, at the cost of a statement
    for each bit set in a batch's size."""
    start, end = 0, len(rows)
    while start < end:
        size = min(CHUNK, 1 << ((end - start).bit_length() - 1))
        yield rows[start : start + size]
        start += size


@functools.lru_cache(maxsize=256)
def _expected_sql(p: str, rows: int) -> str:
    """UPDATE of ``rows`` rows to their runs decided in advance, each only if it is
    still at the expected fence and version; returns the keys of those written.
    Parameters per row: key, fence, version, then :data:`RUN_COLUMNS`'s (for one row,
    a plain UPDATE: nothing to join)."""
    names = [name.strip() for name in RUN_COLUMNS.split(",")]
    if rows == 1:
        sets = ", ".join(f"{n} = ?{i}" for i, n in enumerate(names, start=4))
        return (
            f"UPDATE {p}tasks SET {sets} WHERE task_id = ?1 AND fence = ?2 AND version = ?3 "
            "RETURNING task_id"
        )
    sets = ", ".join(f"{n} = v.new_{n}" for n in names)
    values = ",".join([f"({','.join('?' * (3 + len(names)))})"] * rows)
    return (
        f"WITH v(task_id, fence, version, {', '.join('new_' + n for n in names)}) "
        f"AS (VALUES {values}) UPDATE {p}tasks SET {sets} FROM v "
        f"WHERE {p}tasks.task_id = v.task_id AND {p}tasks.fence = v.fence "
        f"AND {p}tasks.version = v.version RETURNING {p}tasks.task_id"
    )


@functools.lru_cache(maxsize=256)
def _due_sql(p: str, actions: int, refused: int, full: int) -> str:
    """The ids of the earliest due runs of ``actions`` actions (parameters: see
    :func:`_due_params`), each action through its own range of the action index, at
    most a limit each, then the earliest of all in ``(due, priority, seq)`` order; the
    rows of ``full`` full pools left out (named as parameters, read just before in the
    transaction by :func:`~rota.store._pools.full_sql`: a subquery counting places
    here would be evaluated again for every row the UPDATE of a claim looks at)."""
    skip = f" AND task_id NOT IN ({','.join('?' * refused)})" if refused else ""
    if full:
        skip += f" AND (pool IS NULL OR pool NOT IN ({','.join('?' * full)}))"
    arm = (
        f"SELECT * FROM (SELECT task_id, due, priority, seq FROM {p}tasks WHERE action = ? "
        f"AND status = 'scheduled' AND paused = 0 AND due <= ?{skip} "
        "ORDER BY due, priority, seq LIMIT ?)"
    )
    arms = " UNION ALL ".join([arm] * actions)
    return f"SELECT task_id, due FROM ({arms}) ORDER BY due, priority, seq LIMIT ?"


def _due_params(
    actions: Sequence[str],
    now: Time | None,
    refused: Sequence[str],
    limit: int,
    full: Sequence[str] = (),
) -> list[Any]:
    """:func:`_due_sql`'s parameters but the last (the overall limit): per action, the
    action, ``now`` (``None``: any time, as a large number), the refused ids, the full
    pools and ``limit``."""
    upto = 9e999 if now is None else now
    params: list[Any] = []
    for action in actions:
        params += (action, upto, *refused, *full, limit)
    return params


@functools.lru_cache(maxsize=256)
def _outcomes_sql(p: str, rows: int) -> str:
    """INSERT of ``rows`` outcomes."""
    marks = ",".join([f"({','.join('?' * OUTCOME_WIDTH)})"] * rows)
    return f"INSERT INTO {p}outcomes ({_OUTCOME_COLUMNS}) VALUES {marks}"


def _create_private(path: str) -> None:
    """Create a missing database file readable and writable by its owner only (0600,
    whatever the umask): its rows name the code every node runs, and its outcomes
    hold the jobs' output. SQLite gives the ``-wal`` and ``-shm`` files the
    database file's mode. An existing file is left as it is."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _prefixed(table: str, columns: str) -> str:
    """``columns`` (comma-separated) qualified by ``table``."""
    return ", ".join(f"{table}.{name.strip()}" for name in columns.split(","))


def _busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc)
    return "locked" in message or "busy" in message


def _while_busy(db: sqlite3.Connection, statement: str, deadline: float) -> None:
    """Execute ``statement``, again every 10 ms while another process holds the
    database (past the busy timeout), until ``deadline``."""
    while True:
        try:
            db.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _known(known: Known) -> tuple[str, list[str]]:
    """The SQL condition for "a run this node may claim" (:class:`Known`), and its
    parameters."""
    names, broken, refused = list(known.names), list(known.broken), list(known.refused)
    marks = ",".join("?" * len(names))
    broken_marks = ",".join("?" * len(broken))
    paths, path_params = known.paths_sql("?")
    sql = (
        f"(action IN ({marks}) OR (instr(action, ':') > 0 AND action NOT IN ({broken_marks}) "
        f"AND {paths}))"
    )
    if refused:
        sql += f" AND task_id NOT IN ({','.join('?' * len(refused))})"
    return sql, [*names, *broken, *path_params, *refused]


__all__ = ["SQLiteStore", "StoreError"]
