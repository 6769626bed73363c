"""The package's public surface and the purity of the deterministic core."""

from __future__ import annotations

import ast
import pathlib

import pytest

import rota

PUBLIC_MODULES = {
    "calendars", "cron", "misfire", "overlap", "retry", "schedules", "store", "durable", "cli",
    "testing",
    "report", "observe", "metrics", "web", "handoff", "tracing",
}  # fmt: skip
ROOT = pathlib.Path(rota.__file__).parent
CORE_MODULES = sorted(
    [f"_core/{path.name}" for path in (ROOT / "_core").glob("*.py")]
    + ["schedules.py", "misfire.py", "overlap.py", "calendars.py"]
    + ["_scheduling/scheduler.py", "_scheduling/tasks.py"]
)
"""Every module of the deterministic floor, and the scheduler above it (which may
only hold a lock and default its clock)."""
FORBIDDEN = {"time", "threading", "asyncio", "concurrent", "random", "datetime"}
# The Scheduler holds one lock and defaults its clock to time.monotonic; datetime
# converts times given as datetimes (it never reads the time); nothing else.
ALLOWED = {
    "_scheduling/scheduler.py": {"time", "threading", "datetime"},
    "_scheduling/tasks.py": {"threading"},
    "_core/checks.py": {"datetime"},
    "_core/codec.py": {"datetime"},  # a stored time of day read back, never the clock
    "_core/deps.py": {"datetime"},  # a freshness condition's timedelta, never the clock
    "_core/clock.py": {"threading", "datetime"},  # ManualClock wakes the runners waiting on it
    "_core/types.py": {"datetime"},
    "_core/validate.py": {"datetime"},
    "schedules.py": {"datetime"},
    "calendars.py": {"datetime"},  # dates and times of day, converted, never read
}


def test_all_is_exactly_the_public_names() -> None:
    assert sorted(rota.__all__) == sorted(
        ["AsyncRunner", "Backoff", "Cursor", "DurableScheduler", "Event", "EventKind",
         "FixedDelay", "FixedRate", "ManualClock", "Misfire", "NoRetry", "Once", "Overlap", "Pool",
         "Result",
         "RetryPolicy", "RunCancelled", "RunContext", "RunOutcome", "Runner", "Schedule",
         "Scheduler", "Stats", "StatsSnapshot", "Status", "TaskInfo", "Tasks", "Upcoming",
         "Upstream"]
    )  # fmt: skip
    public = {name for name in dir(rota) if not name.startswith("_")}
    assert public - PUBLIC_MODULES == set(rota.__all__)
    for name in rota.__all__:
        assert getattr(rota, name).__doc__, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rota.Nope  # noqa: B018


def test_the_engine_imports_no_time_threads_or_io() -> None:
    for module in CORE_MODULES:
        tree = ast.parse((ROOT / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in FORBIDDEN - ALLOWED.get(module, set()), (module, name)


def test_public_methods_have_docstrings_with_their_cost() -> None:
    for name in ["schedule_once", "schedule_at_fixed_rate", "schedule", "cancel", "status",
                 "tick", "next_run_time", "info", "tasks", "add_listener", "job", "pause",
                 "resume", "reschedule", "is_paused"]:  # fmt: skip
        doc = getattr(rota.Scheduler, name).__doc__
        assert doc, name
        assert "Complexity:" in doc, name
