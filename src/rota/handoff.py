"""Hand-off: a run whose work is to enqueue one message on an external task queue.

rota decides each slot once across nodes (fenced completion); a hand-off run
publishes that slot to Celery, RQ, Dramatiq or arq, with the slot's idempotency
key (``<task id>@<slot>``) as the message's id where the queue takes one and in
its headers, and succeeds when the broker has accepted the message. Its worker
fleet runs the work, unchanged: rota replaces Celery beat, not the workers.

The run is an ordinary run: a publish that fails (broker down, no answer within
:data:`TIMEOUT` seconds) fails the run, retried under the task's retry policy
with the same key; misfire, overlap and deadline policies apply as to any run.
A node killed between the publish and the commit of its outcome leaves the run
to be taken over after its lease, and published again with the same key: a
slot is never lost, and is recorded once; it may be published twice only then.
What each queue then guarantees (``docs/celery-beat.md``):

=========  ==========================================  ============================
target     the key as                                   a second publish of a key
=========  ==========================================  ============================
arq        ``_job_id``                                  refused by arq: exactly once
RQ         ``job_id`` (the key hashed: RQ ids are       refused by RQ while the job
           letters, digits, ``_``, ``-``) with          is in Redis (its TTLs)
           ``unique=True``, ``meta["rota_key"]``
Celery     ``task_id``, header ``rota_key``          a second message: dedupe on
                                                        the worker by the key
Dramatiq   ``message_id``, option ``rota_key``       a second message: dedupe on
                                                        the worker by the key
=========  ==========================================  ============================

Usage, in memory or durable alike::

    from rota import handoff
    handoff.register_broker("main", "redis://localhost:6379/0")
    scheduler.schedule("report", Cron("0 2 * * *"), handoff.publish,
                       kwargs=handoff.message("celery", "proj.tasks.report",
                                              broker="main", queue="reports"))

A task stores only the broker's *name*, never its URL (which may hold a
password): each node resolves the name from :func:`register_broker` or the
environment variable ``ROTA_BROKER_<NAME>`` (``rota run``: the job file's
``[brokers]`` table), and every error shows the URL with its password hidden.
Each target needs its client library: the extras ``rota[celery]``,
``rota[rq]``, ``rota[dramatiq]``, ``rota[arq]``; importing this module
needs none of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rota import RunContext, tracing
from rota._core.types import epoch_shown
from rota.store import redacted

TARGETS = ("celery", "rq", "dramatiq", "arq")
"""The task queues a run can hand its slot to."""

TIMEOUT = 10.0
"""Seconds a publish waits for its broker (to connect, and to accept the message)
before it fails, and with it the run (then retried under the task's policy)."""

_brokers: dict[str, str] = {}
_clients: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()
_importing = threading.Lock()
"""Held while a queue's client library is imported: imported from several pool threads
at once, a library can be seen half made (Celery replaces its own module as it is
imported: ``cannot import name 'Celery'``, measured on 6 of 15 cold starts of 8
threads). Once imported, taking it costs a lock per publish."""


class HandoffError(RuntimeError):
    """A publish that could not be made: its broker unknown, unreachable, or silent.
    The message names the target and the broker's URL with its password hidden."""


def register_broker(name: str, url: str) -> None:
    """Make ``name`` stand for the broker at ``url`` in this process. O(1).

    Raises ``TypeError`` for a non-str argument and ``ValueError`` for an empty
    name or a URL without a scheme (``redis://...``).
    """
    if not isinstance(name, str) or not isinstance(url, str):
        raise TypeError(f"name and url must be str, got {name!r} and {type(url).__name__}")
    if not name or "://" not in url:
        raise ValueError(
            f"a broker needs a name and a URL like redis://host:6379/0, got {name!r} and "
            f"{redacted(url)!r}"
        )
    with _lock:
        _brokers[name] = url


def broker_url(name: str) -> str:
    """The URL a broker name stands for: registered, else ``$ROTA_BROKER_<NAME>``
    (the name upper-cased, other characters than letters and digits as ``_``).

    Raises :class:`HandoffError` for a name this process does not know.
    """
    with _lock:
        found = _brokers.get(name)
    if found is None:
        variable = "ROTA_BROKER_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
        found = os.environ.get(variable)
        if not found:
            raise HandoffError(
                f"no broker {name!r} here: register it (rota.handoff.register_broker), "
                f"set ${variable}, or give it in the job file's [brokers]"
            )
    return found


def message(
    target: str,
    name: str,
    *,
    broker: str = "default",
    queue: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    window: bool = False,
) -> dict[str, Any]:
    """The ``kwargs=`` of a :func:`publish` task: publish task ``name`` (the queue's
    name for it, e.g. ``"proj.tasks.report"``: this process need not import it) on
    ``target`` through the broker named ``broker``, on ``queue`` (default: the
    queue's own), called with ``args`` and ``kwargs`` (and, with ``window``, the
    keyword arguments ``window_start``/``window_end``: the window the run covers,
    epoch seconds). O(size of the arguments).

    Raises ``ValueError`` for an unknown target and ``TypeError`` for names that
    are not non-empty strings (arguments are checked as JSON when a durable task
    stores them).
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    for what, value in (("name", name), ("broker", broker)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{what} must be a non-empty str, got {value!r}")
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise TypeError(f"queue must be a non-empty str or None, got {queue!r}")
    if not isinstance(window, bool):
        raise TypeError(f"window must be a bool, got {window!r}")
    found: dict[str, Any] = {"target": target, "name": name, "broker": broker, "queue": queue,
             "args": list(args), "kwargs": dict(kwargs or {})}  # fmt: skip
    if window:  # (only then: messages stored before it stay as they were)
        found["window"] = True
    return found


def publish(
    *,
    target: str,
    name: str,
    broker: str,
    queue: str | None,
    args: list[Any],
    kwargs: dict[str, Any],
    run: RunContext,
    window: bool = False,
) -> str:
    """A hand-off run: publish this slot's message, keyed by ``run.key``; return the
    receipt (``"<target>:<id>"``, kept as the run's value). Called by the runner,
    with :func:`message`'s keyword arguments.

    Raises :class:`HandoffError` (the run fails, and is retried under the task's
    policy with the same key) when the broker is unknown, cannot be reached or
    does not accept the message within :data:`TIMEOUT` seconds.
    """
    slot = f"slot {epoch_shown(run.slot)}, key {run.key}"  # a retry's own time is not it
    if window:
        start = run.slot if run.window_start is None else run.window_start
        kwargs = {**kwargs, "window_start": start, "window_end": run.window_end}
    url = broker_url(broker)
    publisher = _PUBLISHERS.get(target)
    if publisher is None:
        raise HandoffError(f"unknown target {target!r}: one of {', '.join(TARGETS)} ({slot})")
    try:
        return f"{target}:{publisher(url, name, queue, args, kwargs, run.key)}"
    except HandoffError as exc:
        raise HandoffError(f"{exc} ({slot})") from None
    except ImportError as exc:
        raise HandoffError(
            f"{target}: its client library is missing: pip install 'rota[{target}]' ({exc}; "
            f"{slot})"
        ) from None
    except Exception as exc:
        raise HandoffError(
            f"{target}: publishing {name!r} for {slot} to {redacted(url)} failed: "
            f"{redacted(f'{type(exc).__name__}: {exc}')}"
        ) from None


def _client(target: str, url: str, make: Callable[[], Any]) -> Any:
    """One client per (target, broker URL) in this process, made on first need."""
    key = (target, url)
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = _clients[key] = make()
    return found


def _celery(
    url: str, name: str, queue: str | None, args: list[Any], kwargs: dict[str, Any], key: str
) -> str:
    with _importing:
        from celery import Celery  # type: ignore[import-untyped]

    def make() -> Any:
        app = Celery("rota-handoff", broker=url, set_as_current=False)
        app.conf.broker_connection_timeout = TIMEOUT
        app.conf.broker_connection_retry_on_startup = False
        app.conf.broker_transport_options = {
            "socket_timeout": TIMEOUT, "socket_connect_timeout": TIMEOUT,
            "max_retries": 0,
        }  # fmt: skip
        return app

    app = _client("celery", url, make)
    headers = {"rota_key": key}
    tracing.inject(headers)  # the run's span as the message's parent (traceparent)
    options: dict[str, Any] = {"task_id": key, "headers": headers, "retry": False}
    if queue is not None:
        options["queue"] = queue
    result = app.send_task(name, args=args, kwargs=kwargs, **options)
    return str(result.id)


def _rq(
    url: str, name: str, queue: str | None, args: list[Any], kwargs: dict[str, Any], key: str
) -> str:
    with _importing:
        from redis import Redis
        from rq import Queue
        from rq.exceptions import DuplicateJobError

    def connect() -> Any:
        return Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)

    connection = _client("rq", url, connect)
    target = Queue(queue or "default", connection=connection)
    job_id = rq_job_id(key)
    try:
        job = target.enqueue_call(
            func=name, args=args, kwargs=kwargs, job_id=job_id, meta=_meta(key),
            unique=True,
        )  # fmt: skip
    except DuplicateJobError:  # published already (a lost acknowledgement, a takeover)
        return job_id
    return str(job.id)


def _meta(key: str) -> dict[str, str]:
    """What a message carries beside its arguments (RQ's ``meta``, Dramatiq's
    ``options``): the slot's key, and the run's trace context when tracing is on."""
    meta = {"rota_key": key}
    tracing.inject(meta)
    return meta


def rq_job_id(key: str) -> str:
    """The RQ job id of a slot's key: RQ ids are letters, digits, ``_`` and ``-`` only,
    so the key (``report@1767225600.0``) is hashed (BLAKE2b): the same key, the same
    id, on every node. The key itself is in the job's ``meta["rota_key"]``. O(1)."""
    return "rota-" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def _dramatiq(
    url: str, name: str, queue: str | None, args: list[Any], kwargs: dict[str, Any], key: str
) -> str:
    with _importing:
        from dramatiq import Message
        from dramatiq.brokers.redis import RedisBroker

    def connect() -> Any:  # its own client: RedisBroker(url=...) drops socket timeouts
        from redis import Redis

        client = Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
        return RedisBroker(client=client)  # type: ignore[no-untyped-call]

    broker = _client("dramatiq", url, connect)
    queue_name = queue or "default"
    broker.declare_queue(queue_name)
    sent = broker.enqueue(
        Message(
            queue_name=queue_name,
            actor_name=name,
            args=tuple(args),
            kwargs=kwargs,
            options=_meta(key),
            message_id=key,
        )
    )
    return str(sent.message_id)


def _arq(
    url: str, name: str, queue: str | None, args: list[Any], kwargs: dict[str, Any], key: str
) -> str:
    with _importing:
        from arq import create_pool
        from arq.connections import RedisSettings

    loop = _loop()

    async def connect() -> Any:
        settings = RedisSettings.from_dsn(url)
        settings.conn_timeout = max(1, int(TIMEOUT))
        settings.conn_retries = 0
        return await create_pool(settings)

    def make() -> Any:  # one pool per broker, on the hand-off loop
        return asyncio.run_coroutine_threadsafe(connect(), loop).result(TIMEOUT)

    pool = _client("arq", url, make)
    options: dict[str, Any] = {"_job_id": key}
    if queue is not None:
        options["_queue_name"] = queue
    # None: arq refused a job id it holds already, published before (a lost
    # acknowledgement, a takeover): published either way
    sent = asyncio.run_coroutine_threadsafe(
        asyncio.wait_for(pool.enqueue_job(name, *args, **options, **kwargs), TIMEOUT), loop
    )
    sent.result(TIMEOUT + 1)
    return key


_loops: list[asyncio.AbstractEventLoop] = []  # the one hand-off loop, once started


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop arq's clients live on: one daemon thread of this process, so a
    publish from any thread (a runner's worker, the dispatcher, an event loop of the
    application's own) reuses one connection pool per broker."""
    with _lock:
        if not _loops:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="rota-handoff", daemon=True).start()
            _loops.append(loop)
        return _loops[0]


_PUBLISHERS: dict[str, Callable[..., str]] = {
    "celery": _celery, "rq": _rq, "dramatiq": _dramatiq, "arq": _arq,
}  # fmt: skip

__all__ = ["TARGETS", "TIMEOUT", "HandoffError", "broker_url", "message", "publish",
           "register_broker"]  # fmt: skip
