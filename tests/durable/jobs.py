"""Module-level actions for durable tests (stored by import path, run in child processes)."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from cadence import RunContext


def noop(at: Any) -> None:
    """Does nothing."""


def add(a: int, b: int) -> int:
    """Returns a + b."""
    return a + b


def effect(*, run: RunContext) -> None:
    """Record this run's effect in the effects table of $EFFECTS_DB, keyed by the slot.

    Also appends a start line first, so a test can count starts (re-executions)
    apart from effects (which the key deduplicates, as a real action would).
    Sleeps $EFFECT_SLEEP seconds in between, so kills land mid-run.
    """
    path = os.environ["EFFECTS_DB"]
    with open(path + ".starts", "a") as starts:
        starts.write(f"{run.key} {run.fence} {os.getpid()}\n")
    time.sleep(float(os.environ.get("EFFECT_SLEEP", "0")))
    db = sqlite3.connect(path, timeout=30)
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, pid INTEGER)")
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (run.key, os.getpid()))
    db.close()


def suicide(at: Any) -> None:
    """Kill this process without a word: a poison pill."""
    os._exit(1)
