"""Shared fixtures: a manual clock that starts at an odd time, and a scheduler on it."""

from __future__ import annotations

import logging
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest

from rota import ManualClock, Scheduler

START = 1000

# A suite started in the background by a non-interactive shell (`make test &`, nohup, some
# CI runners) inherits SIGINT ignored, and so would every process it starts: a child
# Python then installs no KeyboardInterrupt handler, and the tests that press Ctrl-C in
# a child wait for it forever. The default, as in a terminal; children get it too
# (a handler, unlike SIG_IGN, does not survive exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """The root logger as it was: a command run in-process installs its own handler on
    the test's captured stderr, which later tests' log lines would meet closed."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in root.handlers[:]:  # (pytest's own capture handlers come and go by phase)
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def clock() -> ManualClock:
    """A ManualClock at 1000, so code that assumes time starts at zero shows."""
    return ManualClock(START)


@pytest.fixture
def sched(clock: ManualClock) -> Scheduler:
    """A Scheduler on the manual clock, backoff 1."""
    return Scheduler(clock=clock)


@pytest.fixture
def pg_dsn() -> str:
    """The DSN of the PostgreSQL server ``make test`` starts (``tests/postgres_server.py``).

    Missing: a failure in CI (the server is part of the suite there), a skip
    elsewhere, saying how to get one.
    """
    dsn = os.environ.get("ROTA_PG_DSN")
    if not dsn:
        unavailable(
            "no PostgreSQL: run the suite through `make test` (it starts a throwaway server), "
            "or set ROTA_PG_DSN"
        )
    return dsn


def unavailable(message: str) -> NoReturn:
    """A server or program the test needs is missing: a failure in CI (``make test``
    provides it there), a skip elsewhere, saying how to get it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pg_prefix(pg_dsn: str) -> Iterator[str]:
    """A table prefix of this test's own in that database; its tables dropped after."""
    import psycopg

    prefix = f"t{uuid.uuid4().hex[:12]}_"
    yield prefix
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        # its own tables, and those of further stores a test made (prefix + "1_", ...)
        found = db.execute(
            "SELECT relname, relkind FROM pg_class WHERE relname LIKE %s AND relkind IN "
            "('r', 'S')",
            (prefix.replace("_", r"\_") + "%",),
        ).fetchall()
        for name, kind in found:
            db.execute(f"DROP {'TABLE' if kind == 'r' else 'SEQUENCE'} IF EXISTS {name} CASCADE")


BACKENDS = ["memory", "durable-memory", "durable-sqlite", "durable-postgres"]
"""Every back end a scheduler runs over: the engine alone, and the durable path on
each store (a MemoryStore, a real SQLite file, a real PostgreSQL server)."""


@pytest.fixture(params=BACKENDS)
def make_sched(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Callable[..., Any]]:
    """A factory of schedulers on one back end, called as ``Scheduler(...)`` is: the
    suites that use it run over memory and over every store. On a durable store the
    scheduler registers the callables it is given (see ``AutoRegistering``)."""
    from tests.helpers import AutoRegistering, make_store

    stores: list[Any] = []
    kind = request.param.removeprefix("durable-")

    def make(**kwargs: Any) -> Any:
        if request.param == "memory":
            return Scheduler(**kwargs)
        if kind == "postgres":
            from rota.store import PostgresStore

            dsn, prefix = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_prefix")
            # a second scheduler in one test gets tables of its own (dropped with them)
            own = f"{prefix}{len(stores)}_" if stores else prefix
            store: Any = PostgresStore(dsn, prefix=own, clock="caller")
        else:
            store = make_store(kind, request, tmp_path / str(len(stores)))
        stores.append(store)
        return AutoRegistering(store, **kwargs)

    make.backend = request.param  # type: ignore[attr-defined]
    yield make
    for store in stores:
        store.close()


@pytest.fixture(scope="session")
def _tracer_switch() -> Any:
    """A tracer provider for the whole process (the API allows one) that hands out the
    tracers of the provider a test switched it to (none: the API's no-op ones)."""
    from opentelemetry import trace

    class Switch(trace.TracerProvider):
        current: Any = trace.NoOpTracerProvider()

        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return self.current.get_tracer(*args, **kwargs)

    switch = Switch()
    trace.set_tracer_provider(switch)
    return switch


@pytest.fixture
def spans(_tracer_switch: Any) -> Iterator[Any]:
    """The OpenTelemetry SDK as the tracer provider for one test, its spans kept in
    memory (the exporter this yields); the API's no-op tracers before and after."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rota import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer_switch.current = provider
    tracing._provider = None  # rota's next run decides its tracer again: the SDK's
    try:
        yield exporter
    finally:
        _tracer_switch.current = trace.NoOpTracerProvider()
        tracing._provider = None
