"""A Redis for the hand-off tests, and the queues' real workers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The Redis ``make test`` starts (``tests/postgres_server.py``), emptied after the
    test. Missing: a failure in CI, a skip elsewhere, saying how to get one."""
    url = os.environ.get("ROTA_REDIS_URL")
    if not url:
        unavailable(
            "no Redis: run the suite through `make test` (it starts a throwaway "
            "redis-server), or set ROTA_REDIS_URL"
        )
    yield url
    import redis

    redis.Redis.from_url(url).flushdb()


@pytest.fixture
def amqp_url() -> str:
    """The RabbitMQ ``make test`` starts (``tests/postgres_server.py``, as root).
    Missing: a failure in CI, a skip elsewhere, saying how to get one."""
    url = os.environ.get("ROTA_AMQP_URL")
    if not url:
        unavailable(
            "no RabbitMQ: run the suite through `make test` as root (it starts a "
            "throwaway rabbitmq-server), or set ROTA_AMQP_URL"
        )
    return url


WORKERS = {
    "celery": ["celery", "-A", "tests.handoff.apps", "worker", "--pool=solo", "-l", "warning",
               "--without-heartbeat", "--without-mingle", "--without-gossip"],
    "rq": ["rq", "worker", "--burst", "-w", "rq.worker.SimpleWorker", "-u", "{url}", "default"],
    "dramatiq": ["dramatiq", "tests.handoff.apps", "--processes", "1", "--threads", "2"],
    "arq": ["arq", "tests.handoff.apps.WorkerSettings"],
}  # fmt: skip
"""Each queue's own worker command (``{url}``: the Redis)."""


class Worker:
    """One real worker of a queue, consuming from the test's Redis."""

    def __init__(self, target: str, url: str, db: Path, *, broker: str | None = None) -> None:
        """``broker``: a Celery worker's broker other than the Redis (``celery -b``)."""
        self.db = db
        argv = [str(BIN / WORKERS[target][0]), *(a.format(url=url) for a in WORKERS[target][1:])]
        if broker is not None:
            argv[1:1] = ["-b", broker]
        env = {**os.environ, "ROTA_REDIS_URL": url, "HANDOFF_DB": str(db),
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        self.log = db.with_suffix(f".{target}.log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)

    def keys(self) -> Counter[str]:
        """How many times each key ran."""
        if not self.db.exists():
            return Counter()
        db = sqlite3.connect(self.db, timeout=30)
        try:
            return Counter(key for (key,) in db.execute("SELECT key FROM runs"))
        except sqlite3.OperationalError:  # no table yet
            return Counter()
        finally:
            db.close()

    def wait_for(self, n: int, timeout: float = 60) -> Counter[str]:
        """Until ``n`` keys ran (bounded); the counts."""
        deadline = time.monotonic() + timeout
        while len(self.keys()) < n:
            tail = self.log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"{len(self.keys())} of {n} keys ran\n{tail}"
            time.sleep(0.1)
        return self.keys()

    def settle(self, total: int, timeout: float = 60) -> Counter[str]:
        """Until ``total`` executions ran, duplicates included (bounded); the counts."""
        deadline = time.monotonic() + timeout
        while sum(self.keys().values()) < total:
            assert time.monotonic() < deadline, (self.keys(), self.log.read_text()[-3000:])
            time.sleep(0.1)
        return self.keys()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
