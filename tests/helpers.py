"""Small helpers for tests: recording actions and outcome summaries."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from rota import RunOutcome, Scheduler
from rota._core.engine import Engine
from rota._scheduling.tasks import LocalTasks
from rota.durable import DurableScheduler, StoredTasks
from rota.store import MemoryStore, SQLiteStore, Store

F = TypeVar("F", bound=Callable[..., Any])


def rows(outcomes: Iterable[RunOutcome]) -> list[tuple[Hashable, Any, str, int]]:
    """(task_id, at, result, attempt) of each outcome, in order."""
    return [(o.task_id, o.at, str(o.result), o.attempt) for o in outcomes]


def recorder(log: list[Any], name: Hashable) -> Callable[[Any], None]:
    """An action that appends (name, at) to ``log``."""

    def action(at: Any) -> None:
        log.append((name, at))

    return action


def failing(exc: BaseException) -> Callable[[Any], None]:
    """An action that always raises ``exc``."""

    def action(at: Any) -> None:
        raise exc

    return action


def snapshot(s: Scheduler, ids: Iterable[Hashable]) -> tuple[Any, ...]:
    """Everything observable about the scheduler for the given ids."""
    return (s.next_run_time(), tuple(s.status(i) for i in ids))


class Collector:
    """An ``on_outcome`` callback that lets a test wait (with a timeout) for outcomes."""

    def __init__(self) -> None:
        import threading

        self.outcomes: list[RunOutcome] = []
        self._cond = threading.Condition()

    def __call__(self, outcome: RunOutcome) -> None:
        with self._cond:
            self.outcomes.append(outcome)
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 10.0) -> list[RunOutcome]:
        """Block until at least ``n`` outcomes arrived; fail the test after ``timeout`` s."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.outcomes) >= n, timeout)
            assert ok, f"only {len(self.outcomes)} of {n} outcomes after {timeout}s"
            return list(self.outcomes)


class AutoRegistering(DurableScheduler):
    """A durable scheduler that registers any callable it is given under a fresh name.

    So the contract's tests, written with closures and lambdas, run unchanged
    against the durable path (a real program registers names or gives
    module-level functions).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.auto: dict[str, Callable[..., object]] = {}

    def _named(self, action: Any) -> Any:
        """Register a callable not known yet under a fresh name (then the scheduler
        stores it by that name)."""
        if callable(action) and not any(known is action for known in self.auto.values()):
            name = f"auto-{len(self.auto)}"
            self.register(name, action)
            self.auto[name] = action
        return action

    def schedule(self, task_id: Any, when: Any, action: Any, **options: Any) -> bool:
        return super().schedule(task_id, when, self._named(action), **options)

    def ensure(self, task_id: Any, when: Any, action: Any, **options: Any) -> bool:
        return super().ensure(task_id, when, self._named(action), **options)

    def job(self, when: Any, **options: Any) -> Callable[[F], F]:
        declare = super().job(when, **options)

        def register(action: F) -> F:
            declare(self._named(action))
            return action

        return register


def wait_until(done: Callable[[], object], timeout: float) -> None:
    """Poll ``done()`` every 50 ms until it is true; fail the test after ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout} s"
        time.sleep(0.05)


def make_store(kind: str, request: Any, tmp_path: Any) -> Store:
    """A fresh store: ``"memory"``, ``"sqlite"`` (a file in ``tmp_path``) or
    ``"postgres"`` (tables of their own on the test server, the caller's clock;
    ``request`` is the pytest fixture request that supplies the server)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        tmp_path.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(tmp_path / "s.db")
    from rota.store import PostgresStore

    dsn, prefix = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_prefix")
    return PostgresStore(dsn, prefix=prefix, clock="caller")


WHERE = ["memory", "durable-memory", "durable-sqlite", "durable-postgres"]
"""Where a test's scheduler keeps its tasks: in memory, or on each store."""


def scheduler_on(
    where: str, request: Any, tmp_path: Any, clock: Any
) -> tuple[Scheduler, Store | None]:
    """A scheduler on ``clock`` (an epoch one) in memory or on a fresh store of
    :data:`WHERE`, and that store (for the caller to close)."""
    if where == "memory":
        return Scheduler(clock=clock, epoch=True), None
    store = make_store(where.removeprefix("durable-"), request, tmp_path)
    return AutoRegistering(store, clock=clock), store


def check_table(sched: Scheduler) -> None:
    """Assert the invariants of the table behind ``sched``: the engine's (in memory)
    or the stored table's (:meth:`rota.durable.StoredTasks.check`)."""
    table = sched.table
    if isinstance(table, LocalTasks):
        engine_of(sched)._check()
    else:
        assert isinstance(table, StoredTasks)
        table.check()


def engine_of(sched: Scheduler) -> Engine:
    """The engine behind an in-memory scheduler (its :class:`LocalTasks` table)."""
    table = sched.table
    assert isinstance(table, LocalTasks), table
    return table.engine
