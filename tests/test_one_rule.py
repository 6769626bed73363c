"""Rules that memory and the stores once stated twice, and answered differently: one
body now (``rota._core.checks``, ``rota._core.types.value_text``), so the same question gets
the same answer in memory, on a MemoryStore, in SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rota import FixedRate, ManualClock, Once
from rota.misfire import Misfire
from rota.observe import source

START = 1_800_000_000


def noop(at: float) -> None:
    pass


def refusal(make_sched: Callable[..., Any], call: Callable[[Any], object]) -> tuple[type, str]:
    sched = make_sched(clock=ManualClock(START))
    with pytest.raises((TypeError, ValueError)) as caught:
        call(sched)
    assert sched.tasks() == []  # nothing changed
    return type(caught.value), str(caught.value)


BAD = {
    "misfire=42 with Once": lambda s: s.schedule("a", Once(5), noop, misfire=42),
    "misfire with Once": lambda s: s.schedule("a", Once(5), noop, misfire=Misfire.SKIP),
    "misfire=42": lambda s: s.schedule("a", FixedRate(5), noop, misfire=42),
    "max_retries=-1": lambda s: s.schedule("a", FixedRate(5), noop, max_retries=-1),
    "priority='high'": lambda s: s.schedule("a", FixedRate(5), noop, priority="high"),
    "jitter=-1": lambda s: s.schedule("a", FixedRate(5), noop, jitter=-1),
    "max_runs=0": lambda s: s.schedule("a", FixedRate(5), noop, max_runs=0),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments_get_one_answer_everywhere(
    make_sched: Callable[..., Any], case: str
) -> None:
    """Before: ``misfire=42`` with ``Once`` was a ValueError in memory and a TypeError
    on a store (the checks ran in two orders). Types are checked first, everywhere."""
    kind, message = refusal(make_sched, BAD[case])
    expected = {
        "misfire=42 with Once": (TypeError, "misfire must be a rota.misfire.Misfire, got 42"),
        "misfire with Once": (ValueError, "misfire applies to recurring schedules"),
        "misfire=42": (TypeError, "misfire must be a rota.misfire.Misfire, got 42"),
        "max_retries=-1": (ValueError, "max_retries"),
        "priority='high'": (TypeError, "priority must be an int, got 'high'"),
        "jitter=-1": (ValueError, "jitter"),
        "max_runs=0": (ValueError, "max_runs must be >= 1, got 0"),
    }[case]
    assert kind is expected[0]
    assert expected[1] in message


VALUES: dict[Any, str] = {"hello": "hello", 42: "42", 1.5: "1.5", True: "true"}


@pytest.mark.parametrize("value", ["hello", 42, 1.5, True, ("a", [1])])
def test_a_runs_value_shows_as_the_same_text_everywhere(
    make_sched: Callable[..., Any], value: Any
) -> None:
    """Before: the dashboard showed a str value as ``'hello'`` in memory and ``hello``
    from a store (``repr`` in one read model, JSON or the text in the other)."""
    clock = ManualClock(START)
    sched = make_sched(clock=clock)
    made = {"a": [1]} if isinstance(value, tuple) else value
    expected = '{"a": [1]}' if isinstance(value, tuple) else VALUES[value]
    seen = source(sched)

    def produce(at: float) -> Any:
        return made

    sched.schedule("job", Once(at=START + 1), produce)
    clock.advance(1)
    (outcome,) = sched.tick(clock())
    assert outcome.value == made
    (shown,) = seen.history("job", 1)
    assert shown.value == expected


def test_the_default_backoff_is_one_rule_past_float_range_too(
    make_sched: Callable[..., Any],
) -> None:
    """A task without a retry policy doubles its delay by the rule a store keeps as
    ``Backoff`` (``rota._core.policy.doubling``: before, two formulas, one raising
    ``OverflowError`` past float range where the other gave an infinite delay). Past
    float range the retry's time is refused and the run fails, the same way."""
    clock = ManualClock(START)
    sched = make_sched(clock=clock, backoff=1e308)

    def fails(at: float) -> None:
        raise ValueError("no")

    sched.schedule("job", Once(at=START), fails, max_retries=3)
    first, second = sched.tick(START), sched.tick(START + 1e308)
    assert [o.result.value for o in first + second] == ["retry", "failed"]
    (last,) = second
    assert isinstance(last.error, ValueError)
    assert "not finite" in str(last.error) or "inf" in str(last.error)


def test_one_read_model_lists_and_records_alike_everywhere(
    make_sched: Callable[..., Any],
) -> None:
    """Before: the dashboard and the metrics read a store through one class and a
    memory scheduler through another that rebuilt history from events, and only a
    durable scheduler had ``listing``/``history``. Now one :class:`rota.observe.Source`
    over the scheduler's own ``listing``/``history`` (its table's read half) answers
    the same on every table: the same entries, the same records of runs, the same
    controls."""
    clock = ManualClock(START)
    # an epoch clock, as a store's always is (memory shows other clocks' times shifted)
    epoch = {"epoch": True} if make_sched.backend == "memory" else {}  # type: ignore[attr-defined]
    sched = make_sched(clock=clock, **epoch)
    seen = source(sched)
    calls = {"n": 0}

    def flaky(at: float) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("second run fails")
        return calls["n"]

    sched.schedule("b-every", FixedRate(10), flaky)
    sched.schedule("a-once", Once(at=START + 1), noop)
    for step in (1, 10, 20):
        clock.set(START + step)
        sched.tick(clock())
    assert type(seen).__name__ == "Source"
    listed = sched.listing()
    assert [str(e.info.task_id) for e in listed] == ["a-once", "b-every"]
    assert [e.info.status.value for e in listed] == ["done", "scheduled"]
    assert [e.last.result if e.last else None for e in listed] == ["ok", "ok"]
    assert [str(e.info.task_id) for e in sched.listing(unfinished=True)] == ["b-every"]
    assert [str(e.info.task_id) for e in sched.listing(after="a-once", limit=1)] == ["b-every"]
    runs = sched.history("b-every", 10)
    assert [(r.at, r.result, r.value, r.error) for r in runs] == [
        (START + 20, "ok", "3", None),
        (START + 10, "failed", None, "ValueError: second run fails"),
        (START, "ok", "1", None),
    ]
    assert [r.at for r in sched.history("b-every", 1)] == [START + 20]
    assert seen.history("b-every", 10) == runs
    assert seen.recent(["a-once", "b-every"], 1) == {
        "a-once": sched.history("a-once", 1),
        "b-every": runs[:1],
    }
    entry = seen.entry("b-every")
    assert entry is not None
    assert entry.last == runs[0]
    assert seen.entry("nobody") is None
    assert seen.control("pause", "b-every") is True
    assert sched.is_paused("b-every")
    assert seen.control("pause", "nobody") is None
    assert seen.check() is None
    with pytest.raises(ValueError, match="limit"):
        sched.history("b-every", -1)
