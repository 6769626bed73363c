"""Dependencies between tasks (issue 45, in progress): the condition as a value, what
``after=`` takes, and the cycle check against a reachability oracle."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota._core.deps import RUN, Upstream, Verdict, cycle, cycle_text, upstreams, verdict


def test_an_upstream_is_a_checked_immutable_value() -> None:
    assert Upstream("import") == Upstream("import", within="slot")
    assert Upstream("rates", timedelta(hours=1)).within == 3600
    assert hash(Upstream("a", "window")) == hash(Upstream("a", "window"))
    for value in (Upstream("a"), Upstream("a", "window"), Upstream("a", timedelta(minutes=5))):
        assert Upstream.from_json(value.to_json()) == value
    with pytest.raises(ValueError, match="within must be 'slot', 'window' or a timedelta"):
        Upstream("a", "hour")
    with pytest.raises(ValueError, match="positive timedelta"):
        Upstream("a", timedelta(0))
    with pytest.raises(TypeError, match="within must be"):
        Upstream("a", 3600)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task_id must be hashable"):
        Upstream(["a"])  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="immutable"):
        Upstream("a").within = "window"


def test_after_takes_an_id_an_upstream_or_a_list_of_them() -> None:
    assert upstreams(None) == ()
    assert upstreams("extract") == (Upstream("extract"),)
    assert upstreams([Upstream("import", "window"), "rates"]) == (
        Upstream("import", "window"),
        Upstream("rates"),
    )
    with pytest.raises(ValueError, match="after names 'a' more than once"):
        upstreams(["a", Upstream("a", "window")])
    with pytest.raises(TypeError, match="after must be a task id"):
        upstreams([3.5])


def test_a_cycle_is_named_in_order() -> None:
    edges = {"b": ["c"], "c": ["a"]}
    path = cycle(edges, "a", ["b"])
    assert path == ["a", "b", "c", "a"]
    assert cycle_text(path) == "'a' -> 'b' -> 'c' -> 'a'"
    assert cycle(edges, "a", []) is None
    assert cycle({"a": ["b"]}, "a", ["a"]) == ["a", "a"]  # after itself
    assert cycle({"a": ["b"], "b": ["a"]}, "c", ["a"]) is None  # not through c


nodes = st.integers(0, 6)
graphs = st.dictionaries(nodes, st.sets(nodes, max_size=3), max_size=7)


@settings(max_examples=300, deadline=None)
@given(graphs, nodes, st.sets(nodes, max_size=3))
def test_cycles_against_reachability(edges: dict[int, set[int]], task: int, new: set[int]) -> None:
    graph = {**edges, task: new}
    seen, todo = set(), list(new)
    while todo:  # what the task waits for, at any depth
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    path = cycle(edges, task, new)
    assert (path is not None) == (task in seen)
    if path is not None:
        assert path[0] == path[-1] == task
        assert all(b in graph.get(a, set()) for a, b in pairwise(path))


class Hourly:
    """An upstream's record: hourly slots from 0, results by slot, its latest ok start."""

    def __init__(self, results: dict[float, str], latest_ok: float | None = None) -> None:
        self.results, self.ok = results, latest_ok

    def slots(self, low: float, high: float) -> list[float]:
        return [float(h * 3600) for h in range(48) if low <= h * 3600 < high]

    def latest_slot(self, at: float) -> float | None:
        return None if at < 0 else float(int(at // 3600) * 3600)

    def result(self, slot: float) -> str | None:
        return self.results.get(slot)

    def latest_ok(self) -> float | None:
        return self.ok


DAY = (0.0, 86400.0)


def test_a_slot_waits_runs_or_is_skipped_as_its_upstreams_say() -> None:
    all_ok = Hourly({float(h * 3600): "ok" for h in range(24)}, latest_ok=80000)
    half = Hourly({float(h * 3600): "ok" for h in range(12)})
    failed = Hourly({**{float(h * 3600): "ok" for h in range(24)}, 7200.0: "failed"})
    records = {"all": all_ok, "half": half, "failed": failed}

    def record(task_id: object) -> Hourly | None:
        return records.get(str(task_id))

    window = [Upstream("all", "window")]
    assert verdict(window, 86400, DAY, record) == RUN
    waiting = verdict([Upstream("half", "window")], 86400, DAY, record)
    assert waiting.kind == "wait"
    assert waiting.waiting[0] == "half@43200.0"
    assert len(waiting.waiting) == 12
    assert verdict([Upstream("failed", "window")], 86400, DAY, record) == Verdict(
        "skip", (), "failed@7200.0"
    )
    assert verdict([Upstream("half")], 7200, DAY, record) == RUN  # its 02:00 slot: ok
    assert verdict([Upstream("half")], 50000, DAY, record).waiting == ("half@46800.0",)
    assert verdict([Upstream("missing")], 7200, DAY, record).waiting == ("missing",)
    fresh = Upstream("all", timedelta(hours=2))
    assert verdict([fresh], 86400, DAY, record) == RUN  # ok at 80000 >= 86400 - 7200
    assert verdict([fresh], 100000, DAY, record).waiting == ("all",)  # too old: waits
    assert verdict([Upstream("half", timedelta(hours=1))], 10, DAY, record).waiting == ("half",)
    both = verdict([Upstream("half", "window"), Upstream("failed", "window")], 86400, DAY, record)
    assert both.kind == "skip"  # one that never holds skips the slot


def test_a_job_files_after_reads_ids_and_tables(tmp_path: Path) -> None:
    from rota.cli._jobfile import load
    from rota.cli._values import JobFileError

    jobs = tmp_path / "jobs.toml"
    head = '[[jobs]]\nid = "report"\ncron = "0 6 * * *"\ncommand = "true"\n'
    jobs.write_text(
        head
        + 'after = [{ job = "import", within = "window" }, { job = "rates", within = "1h" }]\n'
    )
    (job,) = load(jobs, imports=False)
    assert job.after == (Upstream("import", "window"), Upstream("rates", timedelta(hours=1)))
    jobs.write_text(head + 'after = ["import"]\n')
    assert load(jobs, imports=False)[0].after == (Upstream("import"),)
    for bad, words in (
        ('after = [{ job = "a", within = "soon" }]', "within: 'soon' is not a duration"),
        ("after = [3]", "3 is not a job id or"),
        ('after = ["a", "a"]', "after names 'a' more than once"),
        ('after = [{ task = "a" }]', "is not a job id or"),
    ):
        jobs.write_text(head + bad + "\n")
        with pytest.raises(JobFileError, match=f"job 'report': key 'after'.*{words}"):
            load(jobs, imports=False)
