"""The worker side of the hand-off tests: one app per queue, each recording the
rota key of every message it runs in the SQLite file $HANDOFF_DB (one row per
execution, so duplicates can be counted). Run by the queues' own worker commands."""

from __future__ import annotations

import os
import sqlite3
from typing import Any, ClassVar

import dramatiq
from arq import func
from arq.connections import RedisSettings
from celery import Celery  # type: ignore[import-untyped]
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

URL = os.environ.get("ROTA_REDIS_URL", "redis://127.0.0.1:6379/0")


def record(target: str, key: str, args: Any, carrier: Any = None) -> None:
    """Append one execution of ``key`` by ``target``'s worker (with the trace context its
    message carried, ``traceparent``, when it carried one)."""
    parent = (carrier or {}).get("traceparent")
    db = sqlite3.connect(os.environ["HANDOFF_DB"], timeout=30)
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS runs (target TEXT, key TEXT, args TEXT)")
        db.execute("INSERT INTO runs VALUES (?, ?, ?)", (target, key, repr(args)))
        if parent is not None:
            db.execute("CREATE TABLE IF NOT EXISTS traces (target TEXT, key TEXT, parent TEXT)")
            db.execute("INSERT INTO traces VALUES (?, ?, ?)", (target, key, parent))
    db.close()


celery = Celery("tests.handoff.apps", broker=URL)
celery.conf.worker_hijack_root_logger = False


@celery.task(name="tests.handoff.apps.report", bind=True)  # type: ignore[untyped-decorator]
def report(self: Any, *args: Any) -> None:
    """Celery: the key is the task id (and the ``rota_key`` header)."""
    headers = self.request.headers or {}
    record("celery", str(headers.get("rota_key") or self.request.id), args, headers)


def rq_report(*args: Any) -> None:
    """RQ: the key is in the job's meta (its id is the key hashed)."""
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    record("rq", str(job.meta["rota_key"]), args, job.meta)


def rq_window(*args: Any, window_start: float, window_end: float) -> None:
    """RQ, a job with ``window = true``: the window the run covers, as its args."""
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    record("rq", str(job.meta["rota_key"]), (*args, window_start, window_end))


broker = RedisBroker(url=URL)  # type: ignore[no-untyped-call]
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="tests.handoff.apps.dramatiq_report")
def dramatiq_report(*args: Any) -> None:
    """Dramatiq: the key is the message id (and the ``rota_key`` option)."""
    message = CurrentMessage.get_current_message()
    assert message is not None
    record("dramatiq", str(message.options.get("rota_key", message.message_id)), args)


async def arq_report(ctx: dict[str, Any], *args: Any) -> None:
    """arq: the key is the job id."""
    record("arq", str(ctx["job_id"]), args)


class WorkerSettings:
    """``arq tests.handoff.apps.WorkerSettings``."""

    functions: ClassVar = [func(arq_report, name="tests.handoff.apps.arq_report")]
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = 10
