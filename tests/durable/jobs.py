"""Module-level actions for durable tests (stored by import path, run in child processes)."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from rota import RunContext


def noop(at: Any) -> None:
    """Does nothing."""


def add(a: int, b: int) -> int:
    """Returns a + b."""
    return a + b


def effect(*, run: RunContext) -> None:
    """Record this run's effect in the effects table of $EFFECTS_DB, keyed by the slot.

    Also appends a start line first, so a test can count starts (re-executions)
    apart from effects (which the key deduplicates, as a real action would).
    Sleeps $EFFECT_SLEEP seconds in between, so kills land mid-run. With
    $EFFECT_FAIL_FIRST (a period, seconds), the first attempt of every other slot of
    that period fails (before its effect), so its retry makes the effect.
    """
    path = os.environ["EFFECTS_DB"]
    with open(path + ".starts", "a") as starts:
        starts.write(f"{run.key} {run.fence} {os.getpid()}\n")
    time.sleep(float(os.environ.get("EFFECT_SLEEP", "0")))
    period = float(os.environ.get("EFFECT_FAIL_FIRST", "0"))
    if period and run.attempt == 0 and round(run.slot / period) % 2 == 0:
        raise RuntimeError("the first attempt of every other slot fails")
    db = sqlite3.connect(path, timeout=30)
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, pid INTEGER)")
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (run.key, os.getpid()))
    db.close()


def suicide(at: Any) -> None:
    """Kill this process without a word: a poison pill."""
    os._exit(1)


def record(*, run: RunContext) -> None:
    """Append this run's key and attempt to the file $RECORD (one line a run)."""
    with open(os.environ["RECORD"], "a") as out:
        out.write(f"{run.key} {run.attempt}\n")
