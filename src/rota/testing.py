"""The store conformance suite: what every :class:`~rota.store.Store` must do.

A store is correct for :class:`~rota.durable.DurableScheduler` when it passes
this suite. ``MemoryStore``, ``SQLiteStore`` and ``PostgresStore`` run it in
rota's own tests; a third-party store runs it by subclassing
:class:`StoreConformance` in a test module (pytest collects the ``test_``
methods of a class named ``Test...``)::

    from rota.testing import StoreConformance

    class TestMyStore(StoreConformance):
        def make_store(self):
            return MyStore(...)  # fresh and empty, on the caller's clock

        def corrupt(self, store, task_id):
            ...  # write invalid JSON into the row's spec, bypassing the store

The suite uses plain ``assert`` and no test framework. It covers claims
(order, limits, known actions, never a live lease), fences, leases (heartbeat,
expiry and takeover, shift), completions in one transaction, listing and
paging, outcomes and pruning, rows that cannot be read, and re-opening (the
schema is created once and kept). Each test is O(a few rows).
"""

from __future__ import annotations

from typing import Any

from rota._core.types import CLAIMED, RELEASED, Status
from rota.store import Change, Edit, Known, OutcomeRow, Store, TaskRow

EVERY = Known(names=("act",), broken=())
"""Claims that may take the suite's rows (action ``act``)."""
NODE, OTHER = "node-a", "node-b"
LEASE = 30.0


def row(task_id: str, due: float, *, priority: int = 0, action: str = "act") -> TaskRow:
    """A scheduled row, as a scheduler would add it (its spec and state are opaque JSON
    to a store)."""
    return TaskRow(
        task_id, action, {"schedule": {"kind": "once", "at": due}}, {"attempt": 0},
        str(Status.SCHEDULED), False, due, priority,
    )  # fmt: skip


def add(store: Store, *rows: TaskRow) -> None:
    """Insert rows (each queued anew: the store gives it its ``seq``)."""
    for new in rows:

        def insert(old: TaskRow | None, new: TaskRow = new) -> Change[bool]:
            return Change(True, row=new, requeued=True)

        store.modify(new.task_id, insert)


def done(claimed: TaskRow, at: float) -> Edit:
    """The fenced completion of a claimed run: the row ``done``, one outcome."""

    def complete(current: TaskRow | None) -> Change[str]:
        assert current is not None
        current.status, current.owner, current.lease_until = str(Status.DONE), None, None
        outcome = OutcomeRow(
            current.task_id, current.due, 0, current.fence, current.due, "ok", None, at, at
        )
        return Change("done", row=current, outcome=outcome)

    return Edit(claimed.task_id, complete, claimed.fence)


class StoreConformance:
    """The suite; subclass it and implement :meth:`make_store` and :meth:`corrupt`."""

    def make_store(self) -> Store:
        """A fresh, empty store that takes its callers' time (the suite opens it)."""
        raise NotImplementedError

    def corrupt(self, store: Store, task_id: str) -> None:
        """Make ``task_id``'s stored spec invalid JSON, behind the store's back."""
        raise NotImplementedError

    def reopen(self, store: Store) -> Store:
        """A second store object on the same data (another process, a restart); the
        suite opens it."""
        raise NotImplementedError

    def _store(self) -> Any:
        store = self.make_store()
        store.open()
        return store

    # -- claims -------------------------------------------------------------

    def test_a_claim_takes_due_runs_by_time_priority_and_order_added(self) -> None:
        store = self._store()
        add(store, row("late", 20), row("b", 10), row("a", 10), row("urgent", 10, priority=-1))
        add(store, row("future", 99))
        claimed = store.claim(NODE, 50, 3, LEASE, EVERY)
        assert [r.task_id for r in claimed] == ["urgent", "b", "a"]
        assert [r.task_id for r in store.claim(NODE, 50, 10, LEASE, EVERY)] == ["late"]
        assert store.claim(NODE, 50, 10, LEASE, EVERY) == []
        store.close()

    def test_a_claimed_run_is_leased_running_with_a_new_fence(self) -> None:
        store = self._store()
        add(store, row("a", 10))
        before = store.get("a")
        assert before is not None
        [claimed] = store.claim(NODE, 10, 1, LEASE, EVERY)
        assert claimed.status == CLAIMED
        assert (claimed.owner, claimed.lease_until) == (NODE, 10 + LEASE)
        assert claimed.fence == before.fence + 1
        assert not claimed.reclaimed
        stored = store.get("a")
        assert stored is not None
        assert (stored.status, stored.owner, stored.fence) == (CLAIMED, NODE, claimed.fence)
        store.close()

    def test_only_runs_of_known_actions_are_claimed(self) -> None:
        store = self._store()
        add(store, row("mine", 1), row("theirs", 1, action="other"))
        add(store, row("path", 1, action="pkg.mod:fn"))
        names_only = Known(names=("act",), broken=(), prefixes=())
        assert [r.task_id for r in store.claim(NODE, 5, 10, LEASE, names_only)] == ["mine"]
        by_path = Known(names=(), broken=(), prefixes=("pkg.",))
        assert [r.task_id for r in store.claim(NODE, 5, 10, LEASE, by_path)] == ["path"]
        refused = Known(names=("other",), broken=(), refused=("theirs",))
        assert store.claim(NODE, 5, 10, LEASE, refused) == []
        store.close()

    def test_a_paused_or_finished_run_is_not_claimed(self) -> None:
        store = self._store()
        add(store, row("p", 1), row("f", 1))
        store.modify("p", lambda r: Change(None, row=_with(r, paused=True)))
        store.modify("f", lambda r: Change(None, row=_with(r, status=str(Status.CANCELLED))))
        assert store.claim(NODE, 5, 10, LEASE, EVERY) == []
        store.close()

    def test_a_live_lease_is_never_taken_and_an_expired_one_is_taken_over(self) -> None:
        store = self._store()
        add(store, row("a", 1))
        [first] = store.claim(NODE, 1, 1, LEASE, EVERY)
        assert store.claim(OTHER, 1 + LEASE, 1, LEASE, EVERY) == []  # ends at 31: live
        [taken] = store.claim(OTHER, 2 + LEASE, 1, LEASE, EVERY)
        assert taken.reclaimed
        assert (taken.owner, taken.status, taken.expiries) == (OTHER, CLAIMED, 1)
        assert taken.fence == first.fence + 1
        store.close()

    # -- fences and completions ---------------------------------------------

    def test_a_stale_fence_changes_nothing(self) -> None:
        store = self._store()
        add(store, row("a", 1))
        [first] = store.claim(NODE, 1, 1, LEASE, EVERY)
        [second] = store.claim(OTHER, 2 + LEASE, 1, LEASE, EVERY)
        assert store.modify_many([done(first, 40)]) == [None]  # the old holder's
        assert store.outcomes("a", 10) == []
        [result] = store.modify_many([done(second, 41)])
        assert result is not None
        assert result.value == "done"
        stored = store.get("a")
        assert stored is not None
        assert stored.status == Status.DONE
        [outcome] = store.outcomes("a", 10)
        assert (outcome.fence, outcome.finished) == (second.fence, 41)
        store.close()

    def test_completions_in_one_transaction_all_or_none(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1))
        a, b = store.claim(NODE, 1, 2, LEASE, EVERY)

        def broken(current: TaskRow | None) -> Change[None]:
            raise ValueError("a change that fails")

        try:
            store.modify_many([done(a, 2), Edit(b.task_id, broken, b.fence)])
        except ValueError:
            pass
        else:
            raise AssertionError("modify_many swallowed the change's error")
        assert store.outcomes("a", 10) == []
        stored = store.get("a")
        assert stored is not None
        assert stored.status == CLAIMED
        results, claimed = store.complete_and_claim([done(a, 3)], NODE, 3, 1, LEASE, EVERY)
        assert [r.value if r else None for r in results] == ["done"]
        assert claimed == []  # b is leased to this node, live
        store.close()

    def test_a_released_run_is_claimable_at_once_in_its_place(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1))
        a, _ = store.claim(NODE, 1, 2, LEASE, EVERY)

        def give_back(current: TaskRow | None) -> Change[None]:
            assert current is not None
            current.status, current.owner, current.lease_until = str(RELEASED), None, None
            return Change(None, row=current)

        store.modify("a", give_back, fence=a.fence)
        assert [r.task_id for r in store.claim(OTHER, 1, 5, LEASE, EVERY)] == ["a"]
        store.close()

    # -- leases ---------------------------------------------------------------

    def test_a_heartbeat_extends_only_the_held_leases_of_its_node(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1), row("c", 1))
        a, _b, c = store.claim(NODE, 1, 3, LEASE, EVERY)
        store.modify("c", lambda r: Change(None, row=_with(r, status=str(Status.CANCELLED))))
        seen = store.heartbeat(NODE, 20, LEASE, ["a", "c"])
        assert seen == {"a": (a.fence, CLAIMED), "c": (c.fence, str(Status.CANCELLED))}
        got_a, got_b = store.get("a"), store.get("b")
        assert got_a is not None
        assert got_b is not None
        assert (got_a.lease_until, got_b.lease_until) == (20 + LEASE, 1 + LEASE)
        assert store.heartbeat(OTHER, 20, LEASE, ["a"]) == {}
        store.close()

    def test_next_due_counts_due_runs_and_other_nodes_leases(self) -> None:
        store = self._store()
        assert store.next_due(NODE, EVERY) is None
        add(store, row("a", 5), row("b", 50))
        assert store.next_due(NODE, EVERY) == 5
        store.claim(NODE, 5, 1, LEASE, EVERY)
        assert store.next_due(NODE, EVERY) == 50
        assert store.next_due(NODE, EVERY, own=True) == 5 + LEASE
        assert store.next_due(OTHER, EVERY) == 5 + LEASE
        store.close()

    def test_shift_leases_shortens_leases_ending_after_the_bound(self) -> None:
        store = self._store()
        add(store, row("a", 1))
        store.claim(NODE, 1, 1, LEASE, EVERY)
        if store.now() is None:  # a store on its callers' clock
            assert store.shift_leases(10, 20) == 1
            stored = store.get("a")
            assert stored is not None
            assert stored.lease_until == 1 + LEASE - 20
        store.close()

    # -- reading --------------------------------------------------------------

    def test_pages_list_rows_by_id_with_their_latest_outcome(self) -> None:
        store = self._store()
        add(store, *(row(f"t{i}", 1) for i in range(5)))
        claimed = store.claim(NODE, 1, 1, LEASE, EVERY)
        store.modify_many([done(claimed[0], 2)])
        first = store.page(None, 2, unfinished=True)
        assert [listed.row.task_id for listed in first] == ["t1", "t2"]
        rest = store.page(first[-1].row.task_id, None, unfinished=True)
        assert [listed.row.task_id for listed in rest] == ["t3", "t4"]
        everything = store.page()
        assert [listed.row.task_id for listed in everything] == [f"t{i}" for i in range(5)]
        last = everything[0].last
        assert last is not None
        assert last.result == "ok"
        assert [r.task_id for r in store.rows()] == [f"t{i}" for i in range(5)]
        store.close()

    def test_outcomes_are_newest_first_and_pruned_with_finished_rows(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1))
        for task_id, at in [("a", 2), ("b", 100)]:
            [claimed] = [r for r in store.claim(NODE, at, 2, LEASE, EVERY) if r.task_id == task_id]
            store.modify_many([done(claimed, at)])
        assert store.prune(50, 100) == 2  # a's outcome, then its row
        assert store.get("a") is None
        assert [o.task_id for o in store.outcomes("b", 5)] == ["b"]
        store.close()

    def test_recent_gives_each_tasks_latest_outcomes_newest_first(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1), row("c", 1))
        for at in (2, 3, 4):
            for claimed in store.claim(NODE, at, 3, LEASE, EVERY):
                if claimed.task_id != "c":
                    store.modify_many([done(claimed, at)])
                    add(store, row(claimed.task_id, at + 0.5))  # its next slot
        got = store.recent(["a", "b", "c", "nope"], 2)
        assert sorted(got) == ["a", "b", "c", "nope"]
        assert [o.finished for o in got["a"]] == [4, 3]
        assert [o.finished for o in got["b"]] == [4, 3]
        assert got["c"] == got["nope"] == []
        store.close()

    def test_recorded_gives_the_slots_of_a_window_that_have_an_outcome(self) -> None:
        store = self._store()
        add(store, row("a", 1), row("b", 1))
        for at in (2.5, 3, 4):
            for claimed in store.claim(NODE, at, 2, LEASE, EVERY):
                store.modify_many([done(claimed, at)])
                add(store, row(claimed.task_id, at))  # its next slot: at
        assert store.recorded("a", 2.5, 3.5) == {2.5, 3}  # [start, end): 1 is out
        assert store.recorded("a", 0, 10) == {1, 2.5, 3}  # the run at 4 is still due
        assert store.recorded("nope", 0, 10) == set()
        store.close()

    def test_a_row_that_cannot_be_read_is_listed_and_claimed_as_unreadable(self) -> None:
        store = self._store()
        add(store, row("bad", 1), row("good", 1))
        self.corrupt(store, "bad")
        stored = store.get("bad")
        assert stored is not None
        assert stored.unreadable
        assert [r.task_id for r in store.rows()] == ["bad", "good"]
        claimed = {r.task_id: r for r in store.claim(NODE, 1, 5, LEASE, EVERY)}
        assert set(claimed) == {"bad", "good"}
        assert claimed["bad"].unreadable
        assert not claimed["good"].unreadable
        store.close()

    def test_opening_again_keeps_the_schema_and_the_rows(self) -> None:
        store = self._store()
        add(store, row("a", 1))
        store.open()  # idempotent: nothing is created twice, nothing lost
        again = self.reopen(store)
        again.open()
        try:
            stored = again.get("a")
            assert stored is not None
            assert stored.due == 1
            assert store.changes() is not None
        finally:
            again.close()
            store.close()


def _with(current: TaskRow | None, **changes: Any) -> TaskRow:
    assert current is not None
    for name, value in changes.items():
        setattr(current, name, value)
    return current
