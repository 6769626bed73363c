"""The worker side of ``handoff_demo.py``: the task RQ's worker runs for each slot."""

from __future__ import annotations

import os


def report(kind: str) -> None:
    """Append this job's rota key (the slot's idempotency key) to $RAN."""
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    with open(os.environ["RAN"], "a") as ran:
        ran.write(f"{job.meta['rota_key']}\n")
