"""A PostgreSQL outage longer than the store's own retries: nodes keep running.

The server the suite runs beside is stopped (``pg_ctl stop -m fast``) for 20 s,
then 60 s, under a ``rota run`` node and a library node (``Runner.run_forever``),
each with a job due every second; then it is started again. Both processes stay
up through the outage, their runs resume within seconds of the restart, and every
slot from the first to the last is recorded exactly once: the slots due during
the outage are caught up (the default misfire policy), none is lost or doubled.
The outage itself is real time: these are the slowest tests of the suite.
"""

from __future__ import annotations

import itertools
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, Cli
from tests.cli.test_run import RECORD
from tests.helpers import wait_until

LIBRARY_NODE = """
import os, sys
from rota import DurableScheduler, FixedRate, Runner
from rota.store import PostgresStore

store = PostgresStore(sys.argv[1], prefix="lib_")
sched = DurableScheduler(store, imports=True)
sched.ensure("lib", FixedRate(1), "tests.durable.jobs:record", args=[])
Runner(sched).run_forever()
"""


def _pg_ctl(*argv: str) -> None:
    bindir = os.environ.get("ROTA_PG_BIN")
    if not bindir or not os.environ.get("ROTA_PG_DATA"):
        pytest.fail("needs the server tests/postgres_server.py starts (ROTA_PG_BIN)")
    command = [f"{bindir}/pg_ctl", "-D", os.environ["ROTA_PG_DATA"], *argv]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=60, cwd="/")


def _outage(seconds: float) -> None:
    """Stop the server for ``seconds``, then start it as it was started (the options
    it recorded in ``postmaster.opts``)."""
    data = Path(os.environ["ROTA_PG_DATA"])
    options = shlex.split((data / "postmaster.opts").read_text())[1:]
    options = [option for option in options if option not in ("-D", str(data))]
    _pg_ctl("-m", "fast", "-w", "stop")
    try:
        time.sleep(seconds)  # the outage itself: real time is what is under test
    finally:
        _pg_ctl("-o", shlex.join(options), "-l", str(data.parent / "server.log"), "-w", "start")


def _slots(path: Path, task: str) -> Counter[float]:
    """How many times each slot of ``task`` ran (``rota run``'s lines are
    ``ID SLOT ATTEMPT KEY``, the library node's ``KEY ATTEMPT``)."""
    found: Counter[float] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            key = line.split()[-1] if line.startswith(f"{task} ") else line.split()[0]
            if key.startswith(f"{task}@"):
                found[float(key.split("@")[1])] += 1
    return found


@pytest.fixture
def database(pg_dsn: str) -> Iterator[str]:
    """A database of this test's own on the suite's server; dropped after."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"outage_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(pg_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.realtime
@pytest.mark.parametrize("seconds", [20, 60])
def test_nodes_run_on_through_a_postgres_outage(
    cli: Cli, database: str, tmp_path: Path, seconds: float
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(database)
    cli.store = (f"postgresql://{params['user']}@{params['host']}:{params['port']}/"
                 f"{params['dbname']}")  # fmt: skip
    cli.write(f'[[jobs]]\nid = "cmd"\nevery = "1s"\n{RECORD}\n')
    node = cli.start(log=tmp_path / "node.log")
    record = tmp_path / "lib.out"
    with (tmp_path / "lib.log").open("w") as log:  # the child keeps its own copy
        library = subprocess.Popen(
            [sys.executable, "-c", LIBRARY_NODE, database],
            env={**os.environ, "PYTHONPATH": str(ROOT), "RECORD": str(record)},
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    out = tmp_path / "out"
    try:
        wait_until(lambda: len(_slots(out, "cmd")) >= 3 and len(_slots(record, "lib")) >= 3, 30)
        _outage(seconds)
        restarted = time.time()
        assert node.poll() is None, (tmp_path / "node.log").read_text()[-3000:]
        assert library.poll() is None, (tmp_path / "lib.log").read_text()[-3000:]
        # runs resume within a few seconds of the restart, slots of the outage caught up
        wait_until(lambda: max(_slots(out, "cmd")) > restarted and
                   max(_slots(record, "lib")) > restarted, 20)  # fmt: skip
    finally:
        node.send_signal(signal.SIGTERM)
        library.send_signal(signal.SIGTERM)
        codes = [node.wait(60), library.wait(60)]
    assert codes == [0, 0], (tmp_path / "node.log").read_text()[-3000:]
    for ran in (_slots(out, "cmd"), _slots(record, "lib")):
        slots = sorted(ran)
        assert all(round(b - a, 6) == 1 for a, b in itertools.pairwise(slots)), slots
        assert set(ran.values()) == {1}, ran  # none doubled
