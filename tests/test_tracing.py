"""Each run is an OpenTelemetry span (the SDK's in-memory exporter), current while its
action runs, so the work it starts is the span's child: a command gets
``TRACEPARENT``, an HTTP job's request ``traceparent``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from rota import FixedRate, ManualClock, Scheduler, tracing


def test_a_run_is_a_span_whose_context_its_work_carries(spans: Any) -> None:
    seen: list[dict[str, str]] = []
    clock = ManualClock(1000.0)
    sched = Scheduler(clock=clock, epoch=True)
    sched.schedule("sync", FixedRate(10, start=1000.0), lambda at: seen.append(tracing.environ()))

    def boom(at: float) -> None:
        raise RuntimeError("down")

    sched.schedule("fails", FixedRate(10, start=1000.0), boom)
    clock.advance(2.5)
    sched.tick(clock())
    by_job = {s.attributes["rota.job"]: s for s in spans.get_finished_spans()}
    run = by_job["sync"]
    assert run.name == "rota.run"
    assert dict(run.attributes) == {
        "rota.job": "sync", "rota.slot": 1000.0, "rota.attempt": 0,
        "rota.key": "sync@1000.0", "rota.lag_s": 2.5, "rota.result": "ok",
    }  # fmt: skip
    [carried] = seen
    context = run.get_span_context()
    assert carried["TRACEPARENT"].split("-")[:3] == ["00", f"{context.trace_id:032x}",
                                                     f"{context.span_id:016x}"]  # fmt: skip
    failed = by_job["fails"]
    assert failed.attributes["rota.result"] == "failed"
    assert failed.events[0].name == "exception"
    assert not failed.status.is_ok


def test_a_command_gets_traceparent(spans: Any, tmp_path: Any) -> None:
    from rota.cli._command import run_command

    out = tmp_path / "tp"
    clock = ManualClock(1000.0)
    sched = Scheduler(clock=clock, epoch=True)

    def command(at: float, *, run: Any) -> None:
        run_command(["sh", "-c", f'echo "$TRACEPARENT" > {out}'], 10, run=run)

    sched.schedule("cmd", FixedRate(10, start=1000.0), command)
    sched.tick(clock())
    [span] = spans.get_finished_spans()
    context = span.get_span_context()
    parent = out.read_text().strip().split("-")
    assert parent[1:3] == [f"{context.trace_id:032x}", f"{context.span_id:016x}"]


def test_a_failing_tracer_changes_no_run(spans: Any, monkeypatch: Any) -> None:
    calls: list[float] = []
    clock = ManualClock(1000.0)
    sched = Scheduler(clock=clock, epoch=True)
    sched.schedule("sync", FixedRate(10, start=1000.0), calls.append)

    @contextlib.contextmanager
    def cannot_start(*args: Any) -> Iterator[Any]:
        raise RuntimeError("exporter down")
        yield

    monkeypatch.setattr(tracing, "run_span", cannot_start)
    [first] = sched.tick(clock())
    monkeypatch.undo()

    def cannot_end(*args: Any) -> None:
        raise RuntimeError("exporter down")

    monkeypatch.setattr(tracing, "ended", cannot_end)
    clock.advance(10)
    [second] = sched.tick(clock())
    assert calls == [1000.0, 1010.0]  # each action called once
    assert [first.result, second.result] == ["ok", "ok"]


def test_an_interrupt_while_the_tracer_is_looked_up_fails_the_run_not_the_task(
    monkeypatch: Any,
) -> None:
    calls: list[float] = []
    clock = ManualClock(1000.0)
    sched = Scheduler(clock=clock, epoch=True)
    sched.schedule("sync", FixedRate(10, start=1000.0), calls.append)

    def interrupted() -> Any:
        raise KeyboardInterrupt  # as a SIGINT landing in the API's first import

    monkeypatch.setattr(tracing, "ACTIVE", True)
    monkeypatch.setattr(tracing, "current", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        sched.tick(clock())
    assert "was recorded as failed" in "".join(raised.value.__notes__)
    monkeypatch.undo()
    assert calls == []
    info = sched.info("sync")
    assert info is not None
    outcome = info.last_outcome
    assert outcome is not None
    assert (outcome.result, outcome.at) == ("failed", 1000.0)
    clock.advance(10)
    [after] = sched.tick(clock())  # not stuck: the next slot runs
    assert (after.result, calls) == ("ok", [1010.0])
