"""The store protocol: what a durable scheduler needs from a database.

A store keeps one row per task (:class:`TaskRow`: the task's spec and its
current run) and an append-only table of run outcomes (:class:`OutcomeRow`).
It makes no scheduling decision of its own: every change to a row goes
through :meth:`Store.modify`, which reads the row, lets the caller's pure
function (the engine's decision, :mod:`rota.durable`) compute the new row
and the outcome to record, and writes both, all in one transaction. The only
other writes are the lease bookkeeping (:meth:`Store.claim`,
:meth:`Store.heartbeat`), which decide nothing about schedules.

Every method is one transaction; none spans user code. Times are numbers on
the scheduler's (epoch) clock, passed in by the caller as ``now``.

Leases and fencing: :meth:`Store.claim` leases a due row to a node until
``now + lease`` and increments its ``fence``; every later write for that run
(:meth:`Store.modify` with ``fence=``) happens only if the fence still
matches, so a holder that lost its lease (crash, pause) writes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import operator
import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from rota._core.types import (
    CLAIMED,
    FINISHED,
    LEASED,
    NO_SKIPS,
    Skips,
    Status,
    StoreError,
    Time,
    sql_set,
)

from ._ledger import Ledger

T = TypeVar("T")

logger = logging.getLogger("rota.store")
"""The stores' logger."""

COLUMNS = (
    "task_id, action, spec, state, status, paused, due, priority, seq, fence, owner, "
    "lease_until, expiries, version"
)
"""The columns of a stored task, in :class:`TaskRow`'s order (the database stores' SQL)."""
ROW_COLUMNS = COLUMNS.split(",", 1)[1].strip()
"""Every column of a stored task but its key: what rewriting a whole row sets."""
RUN_COLUMNS = "state, status, due, seq, owner, lease_until, expiries, version"
"""The columns a completion decided in advance writes (:attr:`Edit.expect`): the only
ones a run's end changes. The others (action, spec, paused, priority, fence) are those
of the row as claimed, which the ``version`` check guarantees are still the stored ones."""


OUTCOME_COLUMNS = (
    "task_id, slot, attempt, fence, at, result, error, started, finished, skipped, owner, value, "
    "skipped_by"
)
"""The columns of a stored outcome, in :class:`OutcomeRow`'s order."""

SCHEDULED, RUNNING = str(Status.SCHEDULED), str(CLAIMED)
"""The status strings stores write: a claimable run, and a claimed one (see
:data:`rota._core.types.CLAIMED`, which every store's claim and takeover write)."""
LEASED_SQL = sql_set(LEASED)
FINISHED_SQL = sql_set(FINISHED)
"""The leased and final statuses as SQL list literals, from their one definition."""
FINISHED_NAMES = sorted(map(str, FINISHED))
"""The final statuses as a list of str, for a query parameter."""


_PASSWORD = re.compile(
    r"((?:^|\s)password\s*=\s*|(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^:/@\s]*+:)"
    r"(?:'[^']*'|[^\s@/]+)(?=@|\s|$)"
)
"""A password in a URL (``scheme://user:PASSWORD@host``) or a libpq keyword/value
connection string (``password=PASSWORD``)."""


def redacted(text: str) -> str:
    """``text`` with every password in a store URL or connection string in it shown as
    ``***``: how a store URL may appear in output, logs and errors. O(len(text)); a
    text with neither ``://`` nor ``password`` in it (most log lines) is returned at
    the cost of two substring searches."""
    if "://" not in text and "password" not in text:
        return text
    return _PASSWORD.sub(r"\1***", text)


@dataclass(slots=True)
class TaskRow:
    """One stored task: its identity, its spec and its current run.

    ``spec`` (JSON) says what the task is: ``args``, ``kwargs``, ``schedule``,
    ``max_retries``, ``retry``, ``retry_on``, ``misfire``. ``state`` (JSON)
    says where it is: its schedule cursor, retries used by the current slot,
    misfire backlog and skips. ``due`` is the time of its current run;
    ``seq`` orders runs due at the same time and priority (scheduling order,
    across processes). ``fence``, ``owner``, ``lease_until`` and
    ``expiries`` are the lease of a run in flight (``queued``/``running``);
    ``version`` counts the row's writes (a store bumps it on each).
    ``reclaimed`` is set on rows a claim took over from an expired lease,
    ``unreadable`` (why) on rows read (claimed, listed) whose spec or state
    could not be decoded, which are then empty (neither is stored).
    """

    task_id: str
    action: str
    spec: dict[str, Any]
    state: dict[str, Any]
    status: str
    paused: bool
    due: Time
    priority: int = 0
    seq: int = 0
    fence: int = 0
    owner: str | None = None
    lease_until: Time | None = None
    expiries: int = 0
    version: int = 0
    reclaimed: bool = field(default=False, compare=False)
    unreadable: str | None = field(default=None, compare=False)
    spec_text: tuple[object, str] | None = field(default=None, compare=False, repr=False)
    """``(spec, its JSON)`` as read, so an unchanged spec is not encoded again: valid
    while ``spec`` is that very object (specs are replaced, never changed in place)."""

    def copy(self) -> TaskRow:
        """A copy that shares nothing mutable with this row. O(size of the JSON)."""
        return replace(self, spec=_deep(self.spec), state=_deep(self.state), spec_text=None)


@functools.lru_cache(maxsize=64)
def update_sql(table: str, columns: str, mark: str, where: str) -> str:
    """``UPDATE table SET c = mark, ... WHERE where`` for the comma-separated
    ``columns``: how the database stores write rows (``mark``: their placeholder).
    Built once per set of arguments."""
    sets = ", ".join(f"{name.strip()} = {mark}" for name in columns.split(","))
    return f"UPDATE {table} SET {sets} WHERE {where}"


def _c_encoder() -> Callable[[Any], str]:
    """A spec or state as stored: JSON, no NaN or infinity, the bytes
    ``json.dumps(value, allow_nan=False)`` writes. The standard library's C
    encoder, built once and called directly: ``JSONEncoder.encode`` and
    ``json.dumps`` wrap it in Python frames (and ``dumps`` with an argument builds
    a new encoder per call), a seventh of a durable run's cost, measured."""
    reference = json.JSONEncoder(allow_nan=False)
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # no C accelerator (an unusual build): the Python encoder
        return reference.encode
    chunks = make(
        None, reference.default, json.encoder.encode_basestring_ascii, None,
        reference.key_separator, reference.item_separator, False, False, False,
    )  # fmt: skip
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode


def _c_decoder() -> Callable[[str], Any]:
    """JSON text back to its value, as ``json.loads`` reads it (``ValueError`` for
    text that is not one JSON value): the C scanner, called directly."""
    scan = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]

    def decode(text: str) -> Any:
        try:
            value, end = scan(text, 0)
        except StopIteration:  # not a value here (leading space?): json.loads says
            return json.loads(text)
        if end != len(text):  # text after the value: json.loads allows only whitespace
            return json.loads(text)
        return value

    return decode


_encode = _c_encoder()
_decode = _c_decoder()


def _same(value: Any) -> Any:
    return value


def run_values(row: TaskRow, encode: Callable[[Any], Any] = _same) -> tuple[Any, ...]:
    """``row``'s values for :data:`RUN_COLUMNS`, times through ``encode``."""
    due, until = row.due, row.lease_until
    if encode is not _same:  # (SQLite stores the numbers themselves)
        due, until = encode(due), encode(until)
    return (
        _encode(row.state), row.status, due, row.seq, row.owner, until, row.expiries,
        row.version,
    )  # fmt: skip


def row_values(row: TaskRow, encode: Callable[[Any], Any] = _same) -> tuple[Any, ...]:
    """``row``'s values for :data:`COLUMNS`, times through ``encode``: how the
    database stores write a whole row. An unchanged spec is not encoded again."""
    raw = row.spec_text
    spec = raw[1] if raw is not None and raw[0] is row.spec else _encode(row.spec)
    return (
        row.task_id, row.action, spec, _encode(row.state), row.status,
        row.paused, encode(row.due), row.priority, row.seq, row.fence, row.owner,
        encode(row.lease_until), row.expiries, row.version,
    )  # fmt: skip


def task_row(
    found: Sequence[Any], decode: Callable[[Any], Any] = _same, *, lenient: bool = False
) -> TaskRow:
    """The :class:`TaskRow` a database store read (its :data:`COLUMNS`), times
    through ``decode``. Raises :class:`StoreError` for a spec or state that is not
    JSON (the row is left as it is); ``lenient`` (a claim or a read, which one bad
    row must not fail) returns that row instead, both empty and ``unreadable``
    saying why."""
    (task_id, action, spec, state, status, paused, due, priority, seq, fence, owner,
     lease_until, expiries, version) = found  # fmt: skip
    if decode is not _same:  # (SQLite's times are the numbers stored)
        due, lease_until = decode(due), decode(lease_until)
    unreadable = None
    try:
        spec_value, state_value = _parsed(spec), _decode(state)
    except ValueError as exc:
        unreadable = f"its stored spec or state is not valid JSON ({exc})"
        if not lenient:
            raise StoreError(f"task {task_id!r}: {unreadable}; the row is left as it is") from None
        spec_value, state_value = {}, {}
    return TaskRow(
        task_id, action, spec_value, state_value, status, bool(paused), due, priority,
        seq, fence, owner, lease_until, expiries, version, unreadable=unreadable,
        spec_text=None if unreadable else (spec_value, spec),
    )  # fmt: skip


run_order: Callable[[TaskRow], tuple[Any, ...]] = operator.attrgetter("due", "priority", "seq")
"""The order due runs are claimed in: ``(due, priority, seq)``, as the stores' due
indexes sort them (a key function in C: no Python frame per row sorted)."""


def claimed_rows(
    due: Sequence[Sequence[Any]],
    expired: Sequence[Sequence[Any]],
    decode: Callable[[Any], Any] = _same,
) -> list[TaskRow]:
    """What a database store's claim returns, from the rows its statements read
    (:data:`COLUMNS`): the due runs in :func:`run_order`, then the runs taken over
    from expired leases, marked ``reclaimed``. Times through ``decode``; a row
    whose JSON cannot be decoded comes back ``unreadable`` (one bad row fails no
    claim). O(k log k) for k rows."""
    rows = sorted((task_row(found, decode, lenient=True) for found in due), key=run_order)
    for found in expired:
        row = task_row(found, decode, lenient=True)
        row.reclaimed = True
        rows.append(row)
    return rows


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Any:
    """A stored spec, parsed once per distinct text: specs repeat, and are shared
    (they are replaced, never changed in place)."""
    return _decode(text)


def _deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep(v) for v in value]
    return value


class OutcomeRow(NamedTuple):
    """One recorded run: at most one per ``(task_id, slot, attempt, fence)``.

    ``slot`` is the run's slot (the same for every retry of it; the
    idempotency key is ``f"{task_id}@{slot!r}"``), ``at`` the run's own time
    (the slot, or its retry time), ``result`` ``ok``/``retry``/``failed``,
    ``error`` the failure as text, ``skipped`` the slots its misfire policy
    skipped just before it (``skipped_by``: the same by reason, as JSON, e.g.
    ``{"deadline": 2}``, or ``None`` when none was or a store written before
    kept only the count), ``owner`` the node that ran it, ``value`` what the
    action returned, as text (a command job's output tail), bounded.
    """

    task_id: str
    slot: Time
    attempt: int
    fence: int
    at: Time
    result: str
    error: str | None
    started: Time | None
    finished: Time
    skipped: int = 0
    owner: str | None = None
    value: str | None = None
    skipped_by: str | None = None

    @staticmethod
    def skips_text(skips: Skips) -> str | None:
        """``skipped_by`` as a row stores it for a run's skips (``None``: none). O(reasons)."""
        return json.dumps(dict(skips), sort_keys=True) if skips else None

    def skips(self) -> Skips:
        """``skipped_by`` read back (as ``RunOutcome.skipped_by``); for a row that kept
        only the count (written before it), that count as ``misfire``'s. O(reasons)."""
        if self.skipped_by:
            return Skips(json.loads(self.skipped_by))
        return Skips({"misfire": self.skipped}) if self.skipped else NO_SKIPS


class Listed(NamedTuple):
    """A stored task as listed (:meth:`Store.page`): its row and its latest outcome."""

    row: TaskRow
    last: OutcomeRow | None


def outcome_from(found: Sequence[Any], decode: Callable[[Any], Any] = _same) -> OutcomeRow | None:
    """The :class:`OutcomeRow` a database store read (:data:`OUTCOME_COLUMNS`, times
    through ``decode``), or ``None`` for the NULLs of an outer join that found none."""
    if found[0] is None:
        return None
    t, s, a, f, at, r, e, st, fi, sk, o, v, by = found
    return OutcomeRow(t, decode(s), a, f, decode(at), r, e, decode(st), decode(fi), sk, o, v, by)


@dataclass(slots=True)
class Change(Generic[T]):
    """What a :meth:`Store.modify` function decided: a row to write, an outcome, a value.

    ``row`` is written (inserted or updated) unless it is ``None``;
    ``requeued`` gives it a new ``seq`` (its run was queued anew, as the
    engine's queue numbers a pushed run); ``outcome`` is inserted with it;
    ``value`` is returned to the caller.
    """

    value: T
    row: TaskRow | None = None
    outcome: OutcomeRow | None = None
    requeued: bool = False


class Edit(NamedTuple):
    """One change for :meth:`Store.modify_many`: :meth:`Store.modify`'s arguments, and
    optionally ``expect``: ``(version, change)``, a change decided in advance from the
    row at that version, written without reading the row if the row is still at that
    version and fence (one statement); otherwise ``change`` decides from the row."""

    task_id: str
    change: Callable[[TaskRow | None], Change[Any]]
    fence: int | None = None
    expect: tuple[int, Change[Any]] | None = None


def ahead(edits: Sequence[Edit]) -> list[bool]:
    """Which of ``edits`` a database store may write ahead of the others, all in one
    statement: those decided in advance (:attr:`Edit.expect`) whose task has no other
    edit among them (the edits of one task apply in their order). O(len(edits))."""
    ids = [edit.task_id for edit in edits]
    if len(set(ids)) == len(ids):  # each task edited once, as usual: no Counter to build
        return [edit.expect is not None for edit in edits]
    counts = Counter(ids)
    return [edit.expect is not None and counts[edit.task_id] == 1 for edit in edits]


class NodeRow(NamedTuple):
    """A node as its heartbeats recorded it: its name, when it first beat, when it
    last did, and its lease (seconds: past it without a beat, the node is dead)."""

    node: str
    started: Time
    seen: Time
    lease: Time


class Known(NamedTuple):
    """Which runs a node can claim: those of actions it can run (``names``: those it
    registered and the import paths it declared itself, and the other import paths,
    ``"pkg.mod:func"``, that start with one of ``prefixes``, except the ``broken``
    ones it failed to import), except the tasks it ``refused`` (rows it could not
    read). ``prefixes`` ``("",)`` admits every import path; ``()`` none but
    ``names``."""

    names: Collection[str]
    broken: Collection[str]
    refused: Collection[str] = ()
    prefixes: Collection[str] = ("",)

    def __contains__(self, action: object) -> bool:
        return isinstance(action, str) and (
            action in self.names
            or (
                ":" in action
                and action not in self.broken
                and any(action.startswith(prefix) for prefix in self.prefixes)
            )
        )

    def actions(self, stored: Callable[[], Collection[str]]) -> list[str]:
        """The actions whose runs a claim looks for, each through its own range of the
        ``(action, due, priority, seq)`` index, so that rows of actions this node
        cannot run cost it nothing: its ``names`` (not broken), and, if ``prefixes``
        admit import paths, those of the ``stored`` actions (read only then: a loose
        index scan, O(distinct actions x log n)) that they admit. Sorted."""
        found = {name for name in self.names if name not in self.broken}
        if self.prefixes:
            found.update(action for action in stored() if action in self)
        return sorted(found)

    def paths_sql(self, mark: str) -> tuple[str, list[Any]]:
        """The SQL condition (``mark``: the store's parameter mark) and parameters for
        "an import path these ``prefixes`` admit", on a column ``action``: one
        ``substr`` comparison per prefix, nothing for ``""``, false for none."""
        if "" in self.prefixes:
            return "1 = 1", []
        if not self.prefixes:
            return "1 = 0", []
        terms = " OR ".join([f"substr(action, 1, {mark}) = {mark}"] * len(self.prefixes))
        params: list[Any] = []
        for prefix in self.prefixes:
            params += (len(prefix), prefix)
        return f"({terms})", params

    def claims(self, row: TaskRow) -> bool:
        """Whether a claim by this node may take ``row``. O(1) for sets."""
        return row.action in self and row.task_id not in self.refused


def actions_sql(table: str, claimable: str) -> str:
    """The distinct actions of ``table``'s claimable rows (``claimable``: the dialect's
    ``status = 'scheduled' AND`` not-paused condition, the action index's own): a
    loose scan of that index, one seek per action whatever the rows. The same SQL
    for SQLite and PostgreSQL."""
    head = f"FROM {table} WHERE {claimable}"
    return (
        f"WITH RECURSIVE a(x) AS (SELECT (SELECT action {head} ORDER BY action LIMIT 1) "
        f"UNION ALL SELECT (SELECT action {head} AND action > a.x ORDER BY action LIMIT 1) "
        "FROM a WHERE a.x IS NOT NULL) SELECT x FROM a WHERE x IS NOT NULL"
    )


class StoreBase(ABC):
    """What the stores share: :meth:`modify` as one :meth:`modify_many` edit, and
    per-thread connections (``_connection``/``close``) for the database stores."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[Any] = []  # every connection opened, to close them all
        self._all_lock = threading.Lock()

    @abstractmethod
    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """See :meth:`Store.modify_many`."""

    def modify(
        self,
        task_id: str,
        change: Callable[[TaskRow | None], Change[T]],
        *,
        fence: int | None = None,
    ) -> Change[T] | None:
        """See :meth:`Store.modify`."""
        return self.modify_many([Edit(task_id, change, fence)])[0]

    def end_stalled(self, older_than: float) -> list[int]:
        """See :meth:`Store.end_stalled`: an embedded store has no other sessions."""
        return []

    def recent(self, task_ids: Sequence[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """See :meth:`Store.recent`: one :meth:`outcomes` read per task (each an index
        seek: cheap in a process's own SQLite file; a server store does one query)."""
        return {task_id: self.outcomes(task_id, per_task) for task_id in task_ids}

    @abstractmethod
    def outcomes(self, task_id: str, limit: int) -> list[OutcomeRow]:
        """See :meth:`Store.outcomes`."""

    def _opened(self, connection: T) -> T:
        """Keep a new connection, for :meth:`close`, and as the calling thread's, for
        :meth:`release`."""
        with self._all_lock:
            self._all.append(connection)
        mine = getattr(self._local, "mine", None)
        if mine is None:
            mine = self._local.mine = []
        mine.append(connection)
        return connection

    def close(self) -> None:
        """Close every connection this store opened (they are reopened on next use)."""
        with self._all_lock:
            opened, self._all = self._all, []
        for connection in opened:
            connection.close()
        self._local = threading.local()

    def _drop(self, connection: Any) -> None:
        """Forget and close a broken ``connection`` of the calling thread (a lost link,
        a session the server ended): the thread's next use opens a new one. Dropping
        one without closing it would keep its socket, and its server backend, open
        for as long as the store lives. O(connections)."""
        if getattr(self._local, "db", None) is connection:
            self._local.db = None
        mine = getattr(self._local, "mine", None)
        if mine is not None and connection in mine:
            mine.remove(connection)
        with self._all_lock:
            self._all = [c for c in self._all if c is not connection]
        with contextlib.suppress(Exception):  # broken already: closing it only tidies
            connection.close()

    def release(self) -> None:
        """Close the connections the calling thread opened. O(connections)."""
        mine = getattr(self._local, "mine", None)
        if not mine:
            return
        self._local.mine, self._local.db = [], None
        gone = {id(connection) for connection in mine}
        with self._all_lock:
            self._all = [c for c in self._all if id(c) not in gone]
        for connection in mine:
            connection.close()


class Store(Protocol):
    """A durable store of tasks and outcomes (see the module docstring).

    Implementations: :class:`~rota.store.MemoryStore` (in memory, for
    simulations and tests) and :class:`~rota.store.SQLiteStore`.
    """

    def open(self) -> None:
        """Create or migrate the schema; refuse (never delete) data it cannot read."""
        ...

    def close(self) -> None:
        """Release connections; idempotent."""
        ...

    def release(self) -> None:
        """Release the calling thread's connection: a thread that is done with the
        store (a runner's heartbeat or committer thread, at its end) calls it, so
        that starting and stopping runners leaves no connection behind."""
        ...

    def modify(
        self,
        task_id: str,
        change: Callable[[TaskRow | None], Change[T]],
        *,
        fence: int | None = None,
    ) -> Change[T] | None:
        """Read the row, apply ``change`` to a copy, write what it decided; one transaction.

        ``change`` gets ``None`` for an unknown id. With ``fence``, a row whose
        fence differs (or no row) is left alone and ``None`` is returned
        without calling ``change``: the caller's lease was lost.
        """
        ...

    def modify_many(self, edits: Sequence[Edit]) -> list[Change[Any] | None]:
        """Several :meth:`modify` calls (:class:`Edit`) in one transaction, in order.

        Group commit: one commit (one fsync) for many completions. A change
        that raises rolls back the whole transaction.
        """
        ...

    def claim(self, node: str, now: Time, limit: int, lease: Time, known: Known) -> list[TaskRow]:
        """Lease up to ``limit`` runs to ``node``: due rows, then rows whose lease expired.

        Due rows (``scheduled``, not paused, ``due <= now``) go in ``(due,
        priority, seq)`` order; expired leases (``lease_until < now``) are
        taken over (``expiries + 1``, ``reclaimed`` set). Each becomes
        ``running``, owned by ``node`` until ``now + lease``, its fence
        incremented. Only actions in ``known``. Never returns a row leased by
        a live holder.
        """
        ...

    def complete_and_claim(
        self, edits: Sequence[Edit], node: str, now: Time, limit: int, lease: Time, known: Known
    ) -> tuple[list[Change[Any] | None], list[TaskRow]]:
        """:meth:`modify_many` (``edits``), then :meth:`claim`, in one transaction:
        one commit (one fsync) for a batch's completions and the next batch's claim.

        Returns what each would. If it raises, neither happened.
        """
        ...

    def beat(self, node: str, now: Time, lease: Time) -> None:
        """Record that ``node`` is alive at ``now`` (its lease ``lease``): every node's
        heartbeat thread calls it each beat, holding runs or not, so that the nodes
        page lists idle nodes and marks dead ones. One upsert."""
        ...

    def nodes(self) -> list[NodeRow]:
        """Every node that beat since the last :meth:`prune` of its time, by name. One
        read."""
        ...

    def end_stalled(self, older_than: float) -> list[int]:
        """End the sessions of other processes whose transaction on this store has run
        for more than ``older_than`` seconds (a node frozen inside it: a paused VM, a
        debugger), so that the rows it locked are free again; the backend ids ended.

        Only a server store has such sessions: PostgreSQL's ends them with
        ``pg_terminate_backend``, which needs the nodes to share one role (or
        ``pg_signal_backend``); the others return ``[]``. Every node's heartbeat
        thread calls it. One statement.
        """
        ...

    def heartbeat(
        self, node: str, now: Time, lease: Time, held: Collection[str]
    ) -> dict[str, tuple[int, str]]:
        """Extend to ``now + lease`` the leases of the runs ``held`` that ``node`` owns.

        Returns ``{task_id: (fence, status)}`` for those rows: a held run
        missing there (or with another fence) lost its lease; a ``cancelled``
        status means the user cancelled it meanwhile. Only the runs the node
        knows it holds: a row claimed by a transaction whose answer never came
        back (a dropped connection) is left to expire and be taken over, not
        kept by every heartbeat.
        """
        ...

    def shift_leases(self, beyond: Time, by: Time) -> int:
        """Shorten by ``by`` every lease of a run in flight that ends after ``beyond``;
        how many. For a store that takes its callers' time (:meth:`now` is ``None``),
        after the host's wall clock stepped back by ``by``: the leases written before
        the step would otherwise last that much too long (a dead holder's run would
        wait the step out). A node that sees the step calls it; a store that keeps
        its own time changes nothing."""
        ...

    def next_due(self, node: str, known: Known, *, own: bool = False) -> Time | None:
        """The earliest time something may become claimable for ``node``: the
        earliest due run, or the earliest expiry of another node's lease; with
        ``own``, of ``node``'s own leases too (what a runner wakes for: a run whose
        completion it could not record is left leased to it, and a lone node must
        wake to run it again)."""
        ...

    def get(self, task_id: str) -> TaskRow | None:
        """The row of ``task_id``, or ``None``; ``unreadable`` if its stored JSON
        cannot be decoded (see :meth:`rows`)."""
        ...

    def actions(self) -> set[str]:
        """The action names of the tasks that can be claimed or are in flight
        (paused ones aside): for a warning at start-up. The database stores read
        their action index loosely: O(distinct actions x log n), not O(n)."""
        ...

    def tagged(self, tag: str) -> list[str]:
        """The ids of the unfinished tasks with ``tag`` (``spec["tags"]``), sorted: what
        a bulk action by tag acts on. One read of the index of tags."""
        ...

    def pools(self) -> dict[str, tuple[int, int]]:
        """Each pool's size and the places held (its rows under a lease), by name: for
        the dashboard, ``/metrics`` and ``info`` of a run that waits for a place. One
        query, O(pools x log n)."""
        ...

    def rows(self) -> list[TaskRow]:
        """Every row, finished ones included, ordered by task id. A row whose stored
        JSON cannot be decoded is listed too, ``unreadable`` (as a claim returns it),
        so one bad row hides no other. O(n)."""
        ...

    def page(
        self, after: str | None = None, limit: int | None = None, *, unfinished: bool = False
    ) -> list[Listed]:
        """Up to ``limit`` rows (all: ``None``) by task id, after ``after`` (keyset
        paging: pass the last id of a page for the next), each with its latest
        outcome; only unfinished ones with ``unfinished``. One query, linear in the
        rows returned (plus, with ``unfinished``, the finished rows passed over).
        Unreadable rows are listed as :meth:`rows` lists them."""
        ...

    def outcomes(self, task_id: str, limit: int) -> list[OutcomeRow]:
        """The task's latest ``limit`` outcomes, newest first."""
        ...

    def recorded(self, task_id: str, start: Time, end: Time) -> set[Time]:
        """The slots in ``[start, end)`` of the task that have a recorded outcome (any
        result): what a backfill does not run again. Read-only; one query, an index
        range on a database store."""
        ...

    def ended(self, task_id: str, start: Time, end: Time) -> tuple[dict[Time, str], Time | None]:
        """How the task's slots in ``[start, end)`` ended for good (``"ok"`` or
        ``"failed"``; a slot still retried has none), and when its latest ``ok`` run
        started (``None``: none did): what a slot waiting for this task is decided
        from (``after=``). Read-only; one query, an index range on a database store."""
        ...

    def recent(self, task_ids: Sequence[str], per_task: int) -> dict[str, list[OutcomeRow]]:
        """The latest ``per_task`` outcomes of each of ``task_ids``, newest first (what
        a dashboard's list draws its sparklines from); a task without any maps to
        ``[]``. Read-only; as :meth:`outcomes` for each, in at most one query on a
        server store."""
        ...

    @property
    def ledger(self) -> Ledger:
        """What operating a fleet keeps beside the tasks (:class:`rota.store.Ledger`):
        settings, the audit log, the alerts' outbox."""

    def prune(self, before: Time, limit: int) -> int:
        """Delete up to ``limit`` outcomes of runs that finished before ``before``, then
        up to ``limit`` rows of finished tasks (done, failed, cancelled) due before
        ``before`` that have no outcome left; return how many rows went. One
        transaction; unindexed, so it scans the outcomes (see
        :meth:`rota.DurableScheduler.prune`)."""
        ...

    def changes(self, wait: float = 0.0) -> int:
        """A number that changes when another connection or process commits a write.

        A store that is told of changes (PostgreSQL: ``LISTEN``) waits up to
        ``wait`` seconds for one; a store that must be polled returns at once.
        """
        ...

    def now(self) -> Time | None:
        """The store's own time, or ``None`` if it takes its callers' (the host clock).

        A store with a clock of its own (a database server) decides leases and
        due runs by it alone: a node whose clock is off only wakes at the
        wrong moments, it never runs early or takes a live lease.
        """
        ...
