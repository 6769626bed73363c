"""A deterministic simulation of the durable protocol: several nodes, one store.

Hypothesis drives nodes (each a DurableScheduler with its own clock) sharing one
MemoryStore that keeps its own time, through schedule, cancel, pause, resume,
claim, complete, heartbeat, crash (the node loses its memory), stall (the node
stops for longer than a lease, then wakes with its runs in hand) and clock skew
(±1 h). After every step the protocol's invariants must hold; at the end, once
every node recovers and the runs due are drained, no slot may be lost.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rota import DurableScheduler, ManualClock, Misfire, Status
from rota._core.task import Run
from rota.durable._commit import Completion
from rota.durable._rows import Held
from rota.store import MemoryStore

LEASE = 10
NODES = 3
TASKS = ["a", "b", "c"]
PERIOD = 7


class Node:
    """A process: a scheduler, its clock offset, the runs it holds, and whether it stalls."""

    def __init__(self, store: MemoryStore, store_clock: ManualClock, offset: int) -> None:
        self.offset = offset
        self.clock = ManualClock(store_clock() + offset)
        self.sched = DurableScheduler(store, clock=self.clock, lease=LEASE, batch=2)
        self.sched.register("work", _work)
        self.held: list[Held] = []
        self.unrecorded: set[str] = set()  # runs whose completion failed to commit
        self.stalled = False


def elapse(time: ManualClock, nodes: list[Node], dt: int) -> None:
    """``dt`` seconds pass on the store's clock ``time``, a third of a lease at a time;
    each node's clock follows (never back), and the live nodes' heartbeats renew their
    leases as they go."""
    step = LEASE // 3
    while dt > 0:
        time.advance(min(dt, step))
        dt -= step
        for node in nodes:
            node.clock.set(max(node.clock(), time() + node.offset))
            if not node.stalled:
                node.sched._stored._heartbeat(node.clock())


def _work(at: Any) -> None:
    """Never called: the simulation decides each run's result itself."""


class Protocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.time = ManualClock(0)  # the store's clock
        self.store = MemoryStore(clock=self.time)
        self.nodes = [Node(self.store, self.time, 0) for _ in range(NODES)]
        self.faults = False  # a crash or a stall happened: duplicate starts allowed
        self.starts: Counter[tuple[str, Any, int]] = Counter()
        self.fences: dict[str, int] = {}
        self.misfire: dict[str, Misfire | None] = {}

    # -- helpers -------------------------------------------------------------

    def _sync(self, node: Node) -> None:
        node.clock.set(max(node.clock(), self.time() + node.offset))

    def _live(self, i: int) -> Node | None:
        node = self.nodes[i % NODES]
        return None if node.stalled else node

    # -- steps ---------------------------------------------------------------

    @rule(
        i=st.integers(0, NODES - 1),
        task=st.sampled_from(TASKS),
        recurring=st.booleans(),
        retries=st.integers(0, 2),
        misfire=st.sampled_from([None, Misfire.COALESCE, Misfire.SKIP, Misfire.bounded(2)]),
    )
    def schedule(
        self, i: int, task: str, recurring: bool, retries: int, misfire: Misfire | None
    ) -> None:
        node = self._live(i)
        if node is None:
            return
        self._sync(node)
        if recurring:
            added = node.sched.schedule_at_fixed_rate(
                task, 1, PERIOD, "work", max_retries=retries, misfire=misfire
            )
        else:
            added = node.sched.schedule_once(task, 3, "work", max_retries=retries)
            misfire = None
        if added:
            self.misfire[task] = misfire if recurring else None

    @rule(i=st.integers(0, NODES - 1), task=st.sampled_from(TASKS),
          op=st.sampled_from(["cancel", "pause", "resume"]))  # fmt: skip
    def control(self, i: int, task: str, op: str) -> None:
        node = self._live(i)
        if node is not None:
            self._sync(node)
            getattr(node.sched, op)(task)

    @rule(dt=st.integers(0, 2 * LEASE))
    def advance(self, dt: int) -> None:
        """Time passes; live nodes' heartbeat threads renew their leases as it does."""
        elapse(self.time, self.nodes, dt)

    @rule(i=st.integers(0, NODES - 1))
    def claim(self, i: int) -> None:
        node = self._live(i)
        if node is None:
            return
        self._sync(node)
        self._started(node, node.sched.table.claim(node.clock()))

    def _started(self, node: Node, task: Held | Run | None) -> None:
        if task is not None:
            assert isinstance(task, Held)  # (its tasks run one run at a time)
            if task.status is Status.QUEUED:  # claimed by _claim_from_store: start it
                task.engine.start(task)
            slot = task.row.due if not task.row.state["attempt"] else task.row.state["first_at"]
            self.starts[(str(task.task_id), slot, task.row.state["attempt"])] += 1
            node.held.append(task)

    @rule(i=st.integers(0, NODES - 1), k=st.integers(0, 3), ok=st.booleans())
    def complete(self, i: int, k: int, ok: bool) -> None:
        taken = self._take_held(i, k)
        if taken is None:
            return
        node, task, now = taken
        before = self.store.get(str(task.task_id))
        recorded = len(self.store.outcomes(str(task.task_id), 10**6))
        node.sched.table.complete(task, None if ok else ValueError("failed"), now, now)
        if before is None or before.fence != task.fence:  # a stale holder writes nothing
            assert self.store.get(str(task.task_id)) == before
            assert len(self.store.outcomes(str(task.task_id), 10**6)) == recorded
        self._check_recorded(task, before)

    def _take_held(self, i: int, k: int) -> tuple[Node, Held, Any] | None:
        """A run node ``i`` (if live) holds, the ``k``-th (mod), to complete now."""
        node = self._live(i)
        if node is None or not node.held:
            return None
        self._sync(node)
        return node, node.held.pop(k % len(node.held)), node.clock()

    def _check_recorded(self, task: Held, before: Any) -> None:
        """A holder whose lease was current when it completed recorded one outcome under
        its fence; a stale one, none."""
        mine = [o for o in self.store.outcomes(str(task.task_id), 10**6) if o.fence == task.fence]
        assert len(mine) == (1 if before is not None and before.fence == task.fence else 0)

    @rule(i=st.integers(0, NODES - 1), k=st.integers(0, 3), ok=st.booleans())
    def complete_with_the_next_claim(self, i: int, k: int, ok: bool) -> None:
        """A runner's dispatcher: a held run's completion committed in the transaction
        of its next claim (``Store.complete_and_claim``), then reported."""
        taken = self._take_held(i, k)
        if taken is None:
            return
        node, task, now = taken
        error = None if ok else ValueError("failed")
        before = self.store.get(str(task.task_id))
        edit, outcome = node.sched._stored._decided(task, error, now, now)
        reported: list[Any] = []
        done = Completion(edit, task, outcome, error, reported.append)
        self._started(node, node.sched._stored._claim_from_store(now, 2, [done]))
        assert len(reported) == 1
        self._check_recorded(task, before)  # (the claim may have taken the row again)

    @rule(i=st.integers(0, NODES - 1), k=st.integers(0, 3), ok=st.booleans())
    def complete_but_the_commit_fails(self, i: int, k: int, ok: bool) -> None:
        """The store refuses the completion (read-only, revoked, full disk): it is
        reported unrecorded and the run stays leased to the node, to run again once
        that lease expires (by this node too: see the teardown)."""
        taken = self._take_held(i, k)
        if taken is None:
            return
        node, task, now = taken
        before = self.store.get(str(task.task_id))
        _, outcome = node.sched._stored._decided(task, None if ok else ValueError("x"), now, now)
        node.sched._stored._unrecorded(
            task, outcome, RuntimeError("attempt to write a readonly db")
        )
        assert self.store.get(str(task.task_id)) == before  # nothing written
        node.unrecorded.add(str(task.task_id))
        self.faults = True  # its run starts again: a duplicate start, with a fault

    @rule(i=st.integers(0, NODES - 1))
    def heartbeat(self, i: int) -> None:
        node = self._live(i)
        if node is not None:
            self._sync(node)
            node.sched._stored._heartbeat(node.clock())

    @rule(i=st.integers(0, NODES - 1))
    def crash(self, i: int) -> None:
        old = self.nodes[i]
        self.nodes[i] = Node(self.store, self.time, old.offset)
        self.faults = True

    @rule(i=st.integers(0, NODES - 1))
    def stall(self, i: int) -> None:
        node = self.nodes[i]
        if node.held:
            self.faults = True
        node.stalled = True

    @precondition(lambda self: any(n.held and not n.stalled for n in self.nodes))
    @rule(i=st.integers(0, NODES - 1))
    def stall_past_its_lease(self, i: int) -> None:
        """A node holding runs stops (SIGSTOP, a GC pause) for longer than a lease."""
        node = next(n for k, n in enumerate(self.nodes * 2) if k >= i and n.held and not n.stalled)
        self.stall(self.nodes.index(node))
        self.advance(LEASE + 1)

    @rule(i=st.integers(0, NODES - 1))
    def wake(self, i: int) -> None:
        self.nodes[i].stalled = False

    @rule(i=st.integers(0, NODES - 1), offset=st.sampled_from([-3600, 0, 3600]))
    def skew(self, i: int, offset: int) -> None:
        node = self.nodes[i]
        node.offset = offset
        node.clock = ManualClock(self.time() + offset)
        node.sched._clock = node.clock  # the node's clock jumps; the store's does not

    # -- invariants ----------------------------------------------------------

    @invariant()
    def one_live_holder_per_task(self) -> None:
        now = self.time()
        for row in self.store.rows():
            live = row.status in ("queued", "running") and (row.lease_until or 0) >= now
            holders = [
                n for n in self.nodes
                for t in n.held
                if t.task_id == row.task_id and t.fence == row.fence
            ]  # fmt: skip
            assert len(holders) <= 1
            if holders and live:
                assert holders[0].sched.node == row.owner

    @invariant()
    def every_lease_is_known_to_its_node(self) -> None:
        """A run leased to a node is one that node holds or has claimed to start: no
        claim's rows were lost on the way back (they would stay leased, unrun)."""
        for node in self.nodes:
            known = {t.task_id for t in node.held} | {
                t.task_id for t in node.sched._stored._buffer
            }
            known |= node.unrecorded  # (left to expire: see the teardown)
            for row in self.store.rows():
                if row.owner == node.sched.node and row.status in ("queued", "running"):
                    assert row.task_id in known, (row, known)

    @invariant()
    def fences_only_grow(self) -> None:
        for row in self.store.rows():
            assert row.fence >= self.fences.get(row.task_id, 0)
            self.fences[row.task_id] = row.fence

    @invariant()
    def each_run_is_recorded_once(self) -> None:
        for task in TASKS:
            runs = Counter((o.slot, o.attempt) for o in self.store.outcomes(task, 10**6))
            assert all(n == 1 for n in runs.values()), runs

    @invariant()
    def no_duplicate_start_without_a_fault(self) -> None:
        if not self.faults:
            assert all(n == 1 for n in self.starts.values()), self.starts

    def teardown(self) -> None:
        """Every node recovers; the runs due are drained; no slot may be lost. First, a
        node left holding runs whose completion failed wakes by their lease's end to
        run them again, alone: no other node is needed (it never woke for them)."""
        for node in self.nodes:
            ends = [
                r.lease_until for r in self.store.rows()
                if r.task_id in node.unrecorded and r.owner == node.sched.node
                and r.status in ("queued", "running") and r.lease_until is not None
            ]  # fmt: skip
            if ends and not node.stalled:
                wake = node.sched.table.wake_time()
                assert wake is not None
                assert wake <= min(ends)
        for node in self.nodes:
            node.stalled = False
            for task in node.held:  # in-flight runs end (late ones write nothing)
                node.sched.table.complete(task, None, self.time(), self.time())
            node.held.clear()
        self.time.advance(LEASE + 1)
        drain = Node(self.store, self.time, 0)
        drain.sched.tick(self.time())
        for row in self.store.rows():
            if (
                row.status == Status.CANCELLED
                or row.paused
                or row.spec["schedule"]["kind"] != "fixed_rate"
            ):
                continue
            assert row.status == Status.SCHEDULED
            assert row.due > self.time(), row  # nothing due is left behind
            outcomes = self.store.outcomes(row.task_id, 10**6)
            ended = {o.slot for o in outcomes if o.result != "retry"}
            skipped = sum(o.skipped for o in outcomes) + row.state["skipped"]  # still to report
            first = row.state["cursor"][0][0]
            upto = row.state["slot"] if not row.state["attempt"] else row.state["first_at"]
            slots = {first + k * PERIOD for k in range(int((upto - first) // PERIOD))}
            lost = slots - ended
            if self.misfire.get(row.task_id) is None:
                assert not lost, (row, lost)
            else:
                assert len(lost) <= skipped, (row, lost, skipped)


Protocol.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestProtocol = Protocol.TestCase
