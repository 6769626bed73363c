"""The live view's cost is bounded and it shows the newest failures with their
messages (what a node with 200 jobs a second needs of it)."""

from __future__ import annotations

from typing import Any

from rota import FixedRate, ManualClock
from rota.cli import _serve
from rota.durable import DurableScheduler
from rota.store import MemoryStore


class Recorder:
    """A stand-in for rich's Live: counts and keeps what it was given to draw."""

    def __init__(self) -> None:
        self.drawn: list[Any] = []

    def update(self, table: Any, refresh: bool = False) -> None:
        self.drawn.append(table)

    def stop(self) -> None:
        pass


def fail(at: Any) -> None:
    raise RuntimeError(f"disk full at {at}")


def ok(at: Any) -> None:
    pass


def test_the_view_draws_a_bounded_table_at_a_bounded_rate() -> None:
    from rich.table import Table

    clock = ManualClock(1000)
    sched = DurableScheduler(MemoryStore(), clock=clock)
    sched.register("ok", ok)
    for i in range(200):
        sched.schedule(f"job{i:03}", FixedRate(1), "ok")
    live = Recorder()
    view = _serve._View(sched, live, Table)
    for _ in range(100):  # the main loop's wake-ups: one draw per REFRESH at most
        view.refresh()
    assert len(live.drawn) == 1
    [table] = live.drawn
    assert table.row_count == _serve.ROWS
    assert "200 jobs" in str(table.title)


def test_latest_failures_are_the_newest_with_their_message() -> None:
    from rich.table import Table

    clock = ManualClock(1000)
    sched = DurableScheduler(MemoryStore(), clock=clock)
    sched.register("fail", fail)
    for name in ("zz-first", "aa-second", "mm-third", "bb-fourth"):  # fail in this order
        sched.schedule(name, FixedRate(3600), "fail")
        sched.tick(clock())
        clock.advance(1)
    live = Recorder()
    _serve._View(sched, live, Table).refresh()
    caption = str(live.drawn[0].caption)
    assert caption.startswith("latest failures: bb-fourth: RuntimeError: disk full at 1003")
    assert caption.index("bb-fourth") < caption.index("mm-third") < caption.index("aa-second")
    assert "zz-first" not in caption  # three at most
