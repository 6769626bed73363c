"""PostgresStore: one schedule shared by processes on many hosts (extra ``rota[postgres]``).

The same protocol as :class:`~rota.store.SQLiteStore`, on PostgreSQL with
psycopg 3: claims lease due rows with ``FOR UPDATE SKIP LOCKED`` in
``MATERIALIZED`` CTEs (so concurrent nodes never block on, or take, each
other's rows), every write is fenced, and time is the database's: a node
measures its clock's offset from the server when it connects, and leases,
due times and completions are on the server's clock, so a node whose clock
is off only wakes at the wrong moments.

Times are ``numeric`` columns written from the exact text of each number, so
an int stays an int and a float reads back as the very float written. A
completion whose commit outcome is unknown (the connection dropped during
``COMMIT``) is resolved by looking for its outcome row, which exists iff the
commit happened. Writes that make something due soon ``NOTIFY`` the other
nodes (``LISTEN`` on a connection of its own), so they wake at once; polling
remains the safety net.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
from psycopg import errors

from rota._core.types import StoreError, Time

from ._base import COLUMNS as _COLUMNS
from ._base import (
    FINISHED_NAMES,
    LEASED_SQL,
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
    redacted,
    task_row,
)
from ._base import OUTCOME_COLUMNS as _OUTCOME_COLUMNS
from ._ledger import SqlLedger
from ._pgsql import (
    CANCELLED,
    IDLE_TIMEOUT,
    LOCK_TIMEOUT,
    REMEASURE,
    RETRIES,
    SOON,
    STATEMENT_TIMEOUT,
    _due_sql,
    _expected,
    _expected_params,
    _known,
    _migrations,
    _num,
    _outcome_values,
    _time,
    claim_due_sql,
    claim_expired_sql,
    end_stalled_in,
    ledger_run,
    prune_in,
    recorded_in,
    session_settings,
    shown_url,
    stored_version,
    upgrade,
)
from ._pools import pool_name, pool_use, pools_sql, settle
from ._schema import DEFAULT_PREFIX, is_current
from ._tags import tagged_sql
from ._waits import ended_rows, ended_sql, sync_waits, wakes
from ._write import write_row


class PostgresStore(StoreBase):
    """A :class:`~rota.store.Store` on PostgreSQL (psycopg 3).

    ``conninfo`` is a libpq connection string or URL. ``prefix`` names the
    tables (several schedules can share one database). ``clock`` is
    ``"database"`` (default: the server's time, see the module docstring)
    or ``"caller"`` (the scheduler's own clock: for tests with a
    :class:`~rota.ManualClock`).

    Every wait is bounded, on rota's own sessions (``None`` leaves the
    server's setting): ``lock_timeout`` (seconds a statement waits for a row
    another session locked: a control command on a row a frozen node holds
    fails fast, with :class:`StoreError`, instead of hanging),
    ``statement_timeout`` (seconds a statement may run; in a pipeline, every
    statement up to its sync) and ``idle_timeout``
    (``idle_in_transaction_session_timeout``): between them, the server ends the
    transaction of a node frozen inside one (a stopped VM, a debugger, a long GC
    pause) after that long, releasing the rows it locked. Keep both below the
    lease, so that a frozen node's runs are taken over within the lease plus
    that timeout. A statement the server cancelled leaves its connection in
    use; a broken one is closed.

    Thread-safe: each thread gets its own connection, reopened (with
    backoff) when lost. Costs: one transaction per write, one round trip
    per statement; claims read only the earliest due rows, through an index.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: str = "database",
        lock_timeout: float | None = LOCK_TIMEOUT,
        statement_timeout: float | None = STATEMENT_TIMEOUT,
        idle_timeout: float | None = IDLE_TIMEOUT,
        create: bool = True,
    ) -> None:
        if not isinstance(conninfo, str):
            raise TypeError(f"conninfo must be a str, got {conninfo!r}")
        self._settings = session_settings(lock_timeout, statement_timeout, idle_timeout)
        if not isinstance(prefix, str) or not prefix.replace("_", "a").isalnum():
            raise ValueError(f"prefix must be letters, digits and underscores, got {prefix!r}")
        if clock not in ("database", "caller"):
            raise ValueError(f"clock must be 'database' or 'caller', got {clock!r}")
        super().__init__()
        self.conninfo = conninfo
        self._p = prefix
        self._clock = clock
        self._create = create
        self._offset = 0.0  # the server's epoch time minus our monotonic time
        self._measured = -float("inf")  # when (monotonic) it was last measured
        self._latest = -float("inf")  # the latest time now() gave: it never goes back
        self._latest_lock = threading.Lock()
        self._listener: psycopg.Connection[Any] | None = None
        self._notified = 0
        self._channel = f"{prefix}due"

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.conninfo)!r}, prefix={self._p!r})"

    @property
    def url(self) -> str:
        """The store as ``--store`` names it, its password hidden:
        ``postgresql://app@db:5432/app`` (a ``key=value`` connection string is shown
        as that URL too). O(len)."""
        return shown_url(self.conninfo)

    # -- connections -----------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        delay = 0.05
        for attempt in range(RETRIES + 1):
            try:
                db = psycopg.connect(self.conninfo, autocommit=True)
                break
            except psycopg.OperationalError:
                if attempt == RETRIES:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        if self._settings:
            try:
                db.execute(self._settings)
            except BaseException:
                db.close()
                raise
        return self._opened(db)

    def _db(self) -> psycopg.Connection[Any]:
        db: psycopg.Connection[Any] | None = getattr(self._local, "db", None)
        if db is None or db.closed or db.broken:
            db = self._local.db = self._connect()
            if self._clock == "database":
                self._measure_offset(db)
        return db

    def _measure_offset(self, db: psycopg.Connection[Any]) -> None:
        """The server's clock against our monotonic clock, at the middle of a round
        trip: the server's time is then that reading plus the monotonic time since,
        so a step of this host's wall clock (NTP correcting a drifted VM, a laptop
        waking) changes nothing; it is measured again every :data:`REMEASURE` s."""
        before = time.monotonic()
        row = db.execute("SELECT extract(epoch from clock_timestamp())").fetchone()
        after = time.monotonic()
        assert row is not None
        self._offset = float(row[0]) - (before + after) / 2
        self._measured = after

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        db = self._db()
        with db.transaction():
            yield db

    def _retrying(
        self, work: Callable[[psycopg.Connection[Any]], T], *, transaction: bool = True
    ) -> T:
        """Run ``work`` in a transaction (else each of its statements is its own, which
        saves the ``BEGIN`` and ``COMMIT`` round trips); again after a unique violation
        or a lost link."""
        for attempt in range(RETRIES + 1):
            try:
                if not transaction:
                    return work(self._db())
                with self._transaction() as db:
                    return work(db)
            except (errors.UniqueViolation, errors.SerializationFailure, errors.DeadlockDetected):
                if attempt == RETRIES:
                    raise
            except CANCELLED as exc:
                raise self._timed_out(exc) from None
            except psycopg.OperationalError:
                self._drop_current()
                if attempt == RETRIES:
                    raise
                time.sleep(min(0.05 * 2**attempt, 2.0))
        raise AssertionError("unreachable")

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read, each statement its own transaction (retried as
        :meth:`_retrying` does)."""
        return self._retrying(lambda db: db.execute(sql, params).fetchall(), transaction=False)

    def _drop_current(self) -> None:
        """The calling thread's connection met an error other than a cancelled
        statement (a lost link, a session the server ended): closed and forgotten, so
        the next use reconnects and no backend is left behind."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._drop(db)

    def _timed_out(self, exc: Exception) -> StoreError:
        """What a statement the server cancelled (a timeout, a cancel) raises: the
        connection is healthy and kept; the transaction was rolled back."""
        if isinstance(exc, errors.LockNotAvailable):
            why = "a row it needs is locked by another session (lock_timeout)"
        else:
            why = "the server cancelled a statement (statement_timeout or a cancel)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(f"{self}: {why}: {first}; nothing was changed, try again")

    def open(self) -> None:
        """Create the schema, or migrate an older one forward (under an advisory lock);
        a current schema is only read (a read-only role can open the store).

        A schema written before the project's rename (tables ``cadence_*``, opened
        with the default prefix) has its tables, sequence and indexes renamed in
        the migrating transaction, and its stored import paths rewritten (schema
        step 4). Raises :class:`StoreError` for a schema newer than this code.
        """
        p, steps = self._p, _migrations(self._p)
        version, former = self._retrying(partial(stored_version, prefix=p), transaction=False)
        if is_current(version, steps, str(self)):
            return
        if not self._create and version is None and not former:
            raise StoreError(f"{self}: no rota store there (nothing was created)")
        self._retrying(partial(upgrade, prefix=p, steps=steps, where=str(self)))

    def close(self) -> None:
        """Close every connection this store opened (they are reopened on next use)."""
        super().close()
        self._listener = None

    def now(self) -> Time | None:
        """The server's time (our monotonic clock plus its measured offset from the
        server's, see :meth:`_measure_offset`), or ``None`` with ``clock="caller"``.

        Never earlier than a time it gave before, on any thread: a new
        measure (each new connection takes one, half a round trip's noise)
        moves the offset by milliseconds either way, and a run's end read
        before its start would give it a negative duration. O(1).
        """
        if self._clock == "caller":
            return None
        db = self._db()  # measures the offset on first use
        if time.monotonic() - self._measured > REMEASURE:
            try:
                self._measure_offset(db)
            except psycopg.Error:  # the last measure stands; the next use reconnects
                self._drop_current()
        with self._latest_lock:
            self._latest = latest = max(self._latest, time.monotonic() + self._offset)
        return latest

    # -- writes ----------------------------------------------------------

    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """See :meth:`rota.store.Store.modify_many`.

        Round trips: a lone completion decided in advance is one statement,
        its own transaction (no ``BEGIN``/``COMMIT`` round trips); several
        are sent together, as one ``executemany`` (the statement converted
        once, not once per completion) in one pipelined transaction, so a
        group commit waits for the server about once, however many it holds.
        Anything else reads, decides and writes inside a transaction.

        A commit whose outcome is unknown (the connection dropped during it)
        is resolved through the outcomes' key: if the first edit's outcome row
        exists, the transaction committed.
        """
        return self._modify_many(edits)

    def complete_and_claim(
        self, edits: Sequence[Edit], node: str, now: Time, limit: int, lease: Time, known: Known
    ) -> tuple[list[Change[Any] | None], list[TaskRow]]:
        """See :meth:`rota.store.Store.complete_and_claim`: the completions' pipelined
        transaction (see :meth:`modify_many`) claims too before it commits."""
        claimed: list[TaskRow] = []

        def claim(db: psycopg.Connection[Any], sync: Callable[[], object]) -> None:
            claimed[:] = self._claim_in(db, node, now, limit, lease, known, sync)

        return self._modify_many(edits, claim), claimed

    def _modify_many(
        self,
        edits: Sequence[Edit],
        then: Callable[[psycopg.Connection[Any], Callable[[], object]], None] | None = None,
    ) -> list[Change[Any] | None]:
        """:meth:`modify_many`, with ``then(db, sync)`` run in its transaction after the
        edits (``sync``: the pipeline's, to call after its statements)."""
        for attempt in range(RETRIES + 1):
            try:
                db = self._db()
                if len(edits) == 1 and then is None:
                    params = _expected_params(edits[0])
                    if params is not None:  # autocommit: atomic alone
                        found = db.execute(_expected(self._p), params).fetchone()
                        if found is not None:
                            return [self._expected_done(db, edits[0], found)]
                    with self._transaction() as db:  # (a version never comes back)
                        return [self._decide_in(db, edits[0])]
                with db.pipeline() as pipeline, self._transaction() as db:
                    found_all = self._send_expected(db, edits)
                    results = [
                        self._decide_in(db, edit) if found is None
                        else self._expected_done(db, edit, found)
                        for edit, found in zip(edits, found_all, strict=True)
                    ]  # fmt: skip
                    # Between a pipeline's results and its next statement the server
                    # waits "active", under no timeout (up to PostgreSQL 16); after a
                    # sync it waits idle in the transaction, which idle_timeout should
                    # bound and sometimes does not: a node frozen at either point is
                    # ended by the others (end_stalled).
                    self._at("completions: results")
                    pipeline.sync()
                    self._at("completions: synced")
                    if then is not None:
                        then(db, pipeline.sync)
                    return results
            except (errors.UniqueViolation, errors.SerializationFailure, errors.DeadlockDetected):
                if attempt == RETRIES:
                    raise
            except CANCELLED as exc:  # rolled back for sure: nothing to look for
                raise self._timed_out(exc) from None
            except psycopg.OperationalError:
                self._drop_current()
                committed = self._committed(edits)
                if committed is not None:
                    return committed
                if attempt == RETRIES:
                    raise
                time.sleep(min(0.05 * 2**attempt, 2.0))
        raise AssertionError("unreachable")

    def _committed(self, edits: Sequence[Edit]) -> list[Change[Any] | None] | None:
        """After a lost connection: the results, if the transaction had committed."""
        recorded = [e.expect[1] for e in edits if e.expect is not None and e.expect[1].outcome]
        if not recorded:
            return None
        outcome = recorded[0].outcome
        assert outcome is not None
        try:
            if not recorded_in(self._db(), self._p, outcome):
                return None
        except psycopg.OperationalError:
            self._drop_current()
            return None
        return [e.expect[1] if e.expect is not None else None for e in edits]

    def _send_expected(
        self, db: psycopg.Connection[Any], edits: Sequence[Edit]
    ) -> list[tuple[Any, ...] | None]:
        """Send the completions decided in advance among ``edits`` (one ``executemany``),
        those of tasks edited more than once excepted (:func:`~rota.store._base.ahead`):
        each a conditional UPDATE and the outcome's INSERT in one statement, nothing
        inserted unless the row was still at the expected version. For each edit, the
        row that statement returned (``None``: not sent, or its row had changed)."""
        params = [
            _expected_params(edit) if first else None
            for edit, first in zip(edits, ahead(edits), strict=True)
        ]
        sent = [p for p in params if p is not None]
        if not sent:
            return [None] * len(edits)
        cursor = db.cursor()
        cursor.executemany(_expected(self._p), sent, returning=True)
        found: list[tuple[Any, ...] | None] = []
        for p in params:
            if p is None:
                found.append(None)
                continue
            found.append(cursor.fetchone())
            cursor.nextset()
        return found

    def _expected_done(
        self, db: psycopg.Connection[Any], edit: Edit, found: tuple[Any, ...]
    ) -> Change[Any]:
        """The change a completion decided in advance made, its statement having
        returned ``found`` (the run's ``seq``)."""
        assert edit.expect is not None
        decided = edit.expect[1]
        assert decided.row is not None
        decided.row.seq = found[0]
        self._notify(db, decided.row)
        self._sync_waits(db, [decided])  # (after)
        return decided

    def _decide_in(self, db: psycopg.Connection[Any], edit: Edit) -> Change[Any] | None:
        """Read the row (locked), let ``edit.change`` decide, write: in ``db``'s transaction."""
        p = self._p
        task_id, change, fence, _ = edit
        found = db.execute(
            f"SELECT {_COLUMNS} FROM {p}tasks WHERE task_id = %s FOR UPDATE", (task_id,)
        ).fetchone()
        row = None if found is None else task_row(found, _time)
        if fence is not None and (row is None or row.fence != fence):
            return None
        before = None if row is None else row.spec  # (a decision may replace it)
        decided = change(row)
        new = decided.row
        if new is not None:
            new.version = 0 if row is None else row.version + 1
            self._seq(db, decided)
            write_row(db.execute, f"{p}tasks", new, row, "%s", _num, before=before)
        self._record(db, decided)
        self._sync_waits(db, [decided])
        return decided

    def _sync_waits(self, db: psycopg.Connection[Any], decided: list[Change[Any]]) -> None:
        """The index of waiting runs and the wake-ups of ``decided``'s write
        (:func:`~rota.store._waits.sync_waits`), the parks' upstreams locked for share
        and the other nodes notified of a run woken."""
        rows, woken = wakes(decided)
        sync_waits(db.execute, self._p, "%s", rows, woken, _num, share=True,
                   notify=self._channel)  # fmt: skip

    def _seq(self, db: psycopg.Connection[Any], decided: Change[Any]) -> None:
        new = decided.row
        if new is not None and (decided.requeued or new.seq == 0):
            found = db.execute(f"SELECT nextval('{self._p}seq')").fetchone()
            assert found is not None
            new.seq = found[0]
        if new is not None:
            self._notify(db, new)

    def _notify(self, db: psycopg.Connection[Any], new: TaskRow) -> None:
        """Wake the other nodes (at commit) if this write makes something due soon."""
        if new.status == "scheduled" and not new.paused and new.due is not None:
            now = self.now() or time.time()
            if new.due <= now + SOON:
                db.execute("SELECT pg_notify(%s, '')", (self._channel,))

    def _record(self, db: psycopg.Connection[Any], decided: Change[Any]) -> None:
        o = decided.outcome
        if o is not None:
            marks = ",".join(["%s"] * len(o))
            db.execute(
                f"INSERT INTO {self._p}outcomes ({_OUTCOME_COLUMNS}) VALUES ({marks})",
                _outcome_values(o),
            )

    def claim(self, node: str, now: Time, limit: int, lease: Time, known: Known) -> list[TaskRow]:
        """See :meth:`rota.store.Store.claim`: ``SKIP LOCKED``, never waits on other nodes
        (but for a place in a pool: nodes claiming from one pool check it one after
        another, in a transaction of its own, before any run of it starts)."""
        # Each claim statement is atomic alone: claims of due runs and of expired leases
        # need not share a transaction (a retry after a lost link only claims afresh).
        return self._retrying(
            lambda db: self._claim_in(db, node, now, limit, lease, known), transaction=False
        )

    def _claim_in(
        self,
        db: psycopg.Connection[Any],
        node: str,
        now: Time,
        limit: int,
        lease: Time,
        known: Known,
        sync: Callable[[], object] | None = None,
    ) -> list[TaskRow]:
        """:meth:`claim`'s statements on ``db`` (in its transaction, if it has one),
        then ``sync`` (a pipeline's: so that a node frozen after them holds its rows
        only until ``idle_timeout``, see :meth:`_modify_many`)."""
        p = self._p
        where, params = _known(known)
        until = _num(now + lease)
        actions = known.actions(lambda: self._stored_actions(db))
        due = (
            db.execute(
                claim_due_sql(p),
                (actions, _num(now), list(known.refused), limit, limit, node, until),
            ).fetchall()
            if actions
            else []
        )
        expired = (
            []
            if len(due) >= limit
            else db.execute(
                claim_expired_sql(p, where),
                (_num(now), *params, limit - len(due), node, until),
            ).fetchall()
        )
        rows = claimed_rows(due, expired, _time)
        given: set[str] = set()
        if any(pool_name(row) for row in rows):  # (a claim on its own: now in a transaction)
            with db.transaction() if sync is None else contextlib.nullcontext():
                given = settle(db.execute, p, "%s", rows, lock=True)
        if sync is not None:  # in a transaction: the claimed rows stay locked until it ends
            if due or expired:
                self._at("claim: results")
            sync()
            if due or expired:
                self._at("claim: synced")
        return [row for row in rows if row.task_id not in given] if given else rows

    def _at(self, point: str) -> None:
        """A point inside a transaction that holds rows locked (:data:`FAULT_POINTS`),
        where a node may freeze: nothing here; the freeze tests override it to stop
        the process there, one point at a time, deterministically."""

    def end_stalled(self, older_than: float) -> list[int]:
        """See :meth:`rota.store.Store.end_stalled`: the backends of this database whose
        transaction began over ``older_than`` seconds ago and holds a lock on this
        store's tasks (a claim or a completion, never a reader's snapshot) are ended
        (``pg_terminate_backend``); the server rolls their transactions back, which
        frees the rows. Its own transactions are short: a statement is bounded by
        ``statement_timeout``, so a healthy node's never lasts a lease. Logged at
        WARNING. Raises what psycopg raises (a role that may not signal the other's
        backends: ``pg_terminate_backend`` returns false, and nothing is ended)."""

        ended = self._retrying(
            partial(end_stalled_in, prefix=self._p, older_than=older_than), transaction=False
        )
        if ended:
            logger.warning(
                "%s: ended sessions %s: each held this store's rows in a transaction "
                "older than %gs (a frozen node); the rows are free again",
                self, ended, older_than,
            )  # fmt: skip
        return ended

    def heartbeat(
        self, node: str, now: Time, lease: Time, held: Collection[str]
    ) -> dict[str, tuple[int, str]]:
        """See :meth:`rota.store.Store.heartbeat`: all of a node's leases in one
        statement (its own transaction), which also reports the rows it owns."""
        p = self._p

        def work(db: psycopg.Connection[Any]) -> dict[str, tuple[int, str]]:
            owned = db.execute(
                f"UPDATE {p}tasks SET lease_until = CASE WHEN status IN {LEASED_SQL} "
                "THEN %s ELSE lease_until END WHERE owner = %s AND task_id = ANY(%s) "
                "RETURNING task_id, fence, status",
                (_num(now + lease), node, list(held)),
            ).fetchall()
            return {task_id: (fence, status) for task_id, fence, status in owned}

        return self._retrying(work, transaction=False)

    def shift_leases(self, beyond: Time, by: Time) -> int:
        """See :meth:`rota.store.Store.shift_leases`: nothing to do with the
        server's clock (the default: leases are on it, so a node's wall clock
        stepping stretches none); with ``clock="caller"``, one UPDATE."""
        if self._clock == "database":
            return 0
        p = self._p
        return int(
            self._retrying(
                lambda db: (
                    db.execute(
                        f"UPDATE {p}tasks SET lease_until = lease_until - %s WHERE owner IS NOT "
                        f"NULL AND status IN {LEASED_SQL} AND lease_until > %s",
                        (_num(by), _num(beyond)),
                    ).rowcount
                )
            )
        )

    # -- reads -----------------------------------------------------------

    def next_due(self, node: str, known: Known, *, own: bool = False) -> Time | None:
        """See :meth:`rota.store.Store.next_due`."""
        p = self._p
        where, params = _known(known)

        def work(db: psycopg.Connection[Any]) -> Time | None:
            actions = known.actions(lambda: self._stored_actions(db))
            due = (
                db.execute(
                    _due_sql(p, "due", claim=False),
                    (actions, list(known.refused), 1, 1),
                ).fetchone()
                if actions
                else None
            )
            lease = db.execute(
                f"SELECT lease_until FROM {p}tasks WHERE owner IS NOT NULL "
                f"AND (%s OR owner != %s) AND status IN {LEASED_SQL} AND {where} "
                "ORDER BY lease_until LIMIT 1",
                (own, node, *params),
            ).fetchone()
            times = [_time(found[0]) for found in (due, lease) if found is not None]
            return min(times, default=None)

        return self._retrying(work)

    def tagged(self, tag: str) -> list[str]:
        """See :meth:`rota.store.Store.tagged`."""
        return [task_id for (task_id,) in self._fetch(tagged_sql(self._p, "%s"), (tag,))]

    def pools(self) -> dict[str, tuple[int, int]]:
        """See :meth:`rota.store.Store.pools`."""
        return pool_use(self._fetch(pools_sql(self._p)))

    def _stored_actions(self, db: psycopg.Connection[Any]) -> list[str]:
        """The distinct actions of the claimable rows: a loose scan of the action index
        (one seek per action, whatever the rows)."""
        found = db.execute(
            actions_sql(f"{self._p}tasks", "status = 'scheduled' AND NOT paused")
        ).fetchall()
        return [action for (action,) in found]

    def get(self, task_id: str) -> TaskRow | None:
        """See :meth:`rota.store.Store.get`."""
        found = self._retrying(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM {self._p}tasks WHERE task_id = %s", (task_id,)
            ).fetchone()
        )
        return None if found is None else task_row(found, _time, lenient=True)

    def actions(self) -> set[str]:
        """See :meth:`rota.store.Store.actions`: a loose scan of the action index,
        and the runs in flight (the owner index)."""

        def work(db: psycopg.Connection[Any]) -> set[str]:
            flying = db.execute(
                f"SELECT DISTINCT action FROM {self._p}tasks WHERE owner IS NOT NULL "
                f"AND status IN {LEASED_SQL}"
            ).fetchall()
            return {*self._stored_actions(db), *(action for (action,) in flying)}

        return self._retrying(work, transaction=False)

    def rows(self) -> list[TaskRow]:
        """See :meth:`rota.store.Store.rows`."""
        found = self._fetch(f"SELECT {_COLUMNS} FROM {self._p}tasks ORDER BY task_id")
        return [task_row(r, _time, lenient=True) for r in found]

    def page(
        self, after: str | None = None, limit: int | None = None, *, unfinished: bool = False
    ) -> list[Listed]:
        """See :meth:`rota.store.Store.page`: one query; each latest outcome is one
        index seek (a ``LATERAL`` join)."""
        p = self._p
        tasks = ", ".join(f"t.{name.strip()}" for name in _COLUMNS.split(","))
        found = self._retrying(
            lambda db: db.execute(
                f"SELECT {tasks}, o.* FROM {p}tasks t LEFT JOIN LATERAL (SELECT "
                f"{_OUTCOME_COLUMNS} FROM {p}outcomes WHERE task_id = t.task_id ORDER BY "
                "slot DESC, attempt DESC, fence DESC LIMIT 1) o ON true "
                "WHERE (%s::text IS NULL OR t.task_id > %s) AND NOT (%s AND t.status = ANY(%s)) "
                "ORDER BY t.task_id LIMIT %s",
                (after, after, unfinished, FINISHED_NAMES, limit),
            ).fetchall(),
            transaction=False,
        )
        width = len(_COLUMNS.split(","))
        return [
            Listed(task_row(r[:width], _time, lenient=True), outcome_from(r[width:], _time))
            for r in found
        ]

    def outcomes(self, task_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`rota.store.Store.outcomes`."""
        found = self._retrying(
            lambda db: db.execute(
                f"SELECT {_OUTCOME_COLUMNS} FROM {self._p}outcomes WHERE task_id = %s "
                "ORDER BY slot DESC, attempt DESC, fence DESC LIMIT %s",
                (task_id, limit),
            ).fetchall()
        )
        return [outcome for found_row in found if (outcome := outcome_from(found_row, _time))]

    def recorded(self, task_id: str, start: Time, end: Time) -> set[Time]:
        """See :meth:`rota.store.Store.recorded`."""
        found = self._retrying(
            lambda db: db.execute(
                f"SELECT DISTINCT slot FROM {self._p}outcomes WHERE task_id = %s AND "
                "slot >= %s AND slot < %s",
                (task_id, _num(start), _num(end)),
            ).fetchall()
        )
        return {_time(slot) for (slot,) in found}

    def ended(self, task_id: str, start: Time, end: Time) -> tuple[dict[Time, str], Time | None]:
        """See :meth:`rota.store.Store.ended`: one query over the task's index range."""
        found = self._retrying(
            lambda db: db.execute(
                ended_sql(self._p, "%s"), (task_id, _num(start), _num(end), task_id)
            ).fetchall()
        )
        return ended_rows([(_time(s), r, _time(t)) for s, r, t in found], start, end)

    def recent(self, task_ids: Sequence[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """See :meth:`rota.store.Store.recent`: one query, an index range per task
        (a ``LATERAL`` join over the ids)."""
        found = self._retrying(
            lambda db: db.execute(
                f"SELECT o.* FROM unnest(%s::text[]) AS ids(id), LATERAL (SELECT "
                f"{_OUTCOME_COLUMNS} FROM {self._p}outcomes WHERE task_id = ids.id ORDER BY "
                "slot DESC, attempt DESC, fence DESC LIMIT %s) o",
                (list(task_ids), per_task),
            ).fetchall(),
            transaction=False,
        )
        got: dict[str, list[OutcomeRow]] = {task_id: [] for task_id in task_ids}
        for found_row in found:
            outcome = outcome_from(found_row, _time)
            if outcome is not None:
                got[outcome.task_id].append(outcome)
        return got

    def beat(self, node: str, now: Time, lease: Time) -> None:
        """See :meth:`rota.store.Store.beat`: one statement, its own transaction."""

        def work(db: psycopg.Connection[Any]) -> None:
            db.execute(
                f"INSERT INTO {self._p}nodes VALUES (%s, %s, %s, %s) ON CONFLICT (node) "
                "DO UPDATE SET seen = excluded.seen, lease = excluded.lease",
                (node, _num(now), _num(now), _num(lease)),
            )

        self._retrying(work, transaction=False)

    def nodes(self) -> list[NodeRow]:
        """See :meth:`rota.store.Store.nodes`."""

        found = self._fetch(f"SELECT * FROM {self._p}nodes ORDER BY node")
        return [NodeRow(n, _time(a), _time(b), _time(c)) for n, a, b, c in found]

    def prune(self, before: Time, limit: int) -> int:
        """See :meth:`rota.store.Store.prune`."""
        return self._retrying(partial(prune_in, prefix=self._p, before=before, limit=limit))

    @property
    def ledger(self) -> SqlLedger:
        """See :attr:`rota.store.Store.ledger`."""
        return SqlLedger(self._p, partial(ledger_run, self._retrying))

    def changes(self, wait: float = 0.0) -> int:
        """A count of the other nodes' notifications (``LISTEN``); waits up to ``wait``
        seconds for the first, then takes those already there."""
        try:
            listener = self._listener
            if listener is None or listener.closed or listener.broken:
                listener = self._listener = self._connect()
                listener.execute(f"LISTEN {self._channel}")
                self._notified += 1  # (re)connected: notifications may have been missed
                return self._notified
            for _ in listener.notifies(timeout=wait, stop_after=1):
                self._notified += 1
            for _ in listener.notifies(timeout=0):
                self._notified += 1
        except psycopg.OperationalError:
            self._listener = None
            self._notified += 1
        return self._notified


__all__ = ["PostgresStore"]
