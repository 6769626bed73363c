"""Shared fixtures: a manual clock that starts at an odd time, and a scheduler on it."""

from __future__ import annotations

import pytest

from cadence import ManualClock, Scheduler

START = 1000


@pytest.fixture
def clock() -> ManualClock:
    """A ManualClock at 1000, so code that assumes time starts at zero shows."""
    return ManualClock(START)


@pytest.fixture
def sched(clock: ManualClock) -> Scheduler:
    """A Scheduler on the manual clock, backoff 1."""
    return Scheduler(clock=clock)
