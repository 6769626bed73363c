"""The timing both peer drains share: worker processes started together, polled until done."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import psycopg


def timed(
    node: Callable[..., None], args: tuple[Any, ...], processes: int, conninfo: str,
    done: Callable[[psycopg.Connection[Any]], bool],
) -> float:  # fmt: skip
    """Seconds from the go of ``processes`` workers to ``done`` (polled every 10 ms).

    Each worker (a spawned process) runs ``node(*args, ready, go)``: it sets
    ``ready`` once connected, waits for ``go``, then works. The workers are
    terminated once ``done`` holds.
    """
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    readies = [ctx.Event() for _ in range(processes)]
    workers = [ctx.Process(target=node, args=(*args, r, go), daemon=True) for r in readies]
    for worker in workers:
        worker.start()
    for ready in readies:
        ready.wait(120)
    with psycopg.connect(conninfo, autocommit=True) as c:
        start = time.perf_counter()
        go.set()
        while not done(c):
            time.sleep(0.01)
        elapsed = time.perf_counter() - start
    for worker in workers:
        worker.terminate()
        worker.join(30)
    return elapsed
