"""A deterministic simulation of a pool shared by several nodes on one store.

Hypothesis drives three nodes (each a DurableScheduler with its own clock) sharing a
MemoryStore that keeps its own time, through claims, completions, heartbeats and
kills (a node loses its memory; its leases stay until taken over). After every step:
the runs the live nodes hold of the pool, and the places the store counts, are never
more than its size; a run waits only while the pool is full. At the end, every node
recovers and the runs due are drained: none is lost.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rota import FixedRate, ManualClock, Pool, Status
from rota.durable._rows import Held
from rota.store import MemoryStore
from tests.durable.test_simulation import LEASE, Node, elapse

NODES = 3
SIZE = 2
TASKS = [f"load{i}" for i in range(5)]


class PoolProtocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.time = ManualClock(0)  # the store's clock
        self.store = MemoryStore(clock=self.time)
        self.nodes = [Node(self.store, self.time, 0) for _ in range(NODES)]
        pool = Pool("warehouse", SIZE)
        for i, task in enumerate(TASKS):
            self.nodes[0].sched.schedule(task, FixedRate(5, start=1 + i), "work", pool=pool)
        self.runs = 0

    def _sync(self, node: Node) -> None:
        node.clock.set(max(node.clock(), self.time()))

    @rule(dt=st.integers(0, 2 * LEASE))
    def advance(self, dt: int) -> None:
        """Time passes; every node's heartbeat renews its leases as it does."""
        elapse(self.time, self.nodes, dt)

    @rule(i=st.integers(0, NODES - 1))
    def claim(self, i: int) -> None:
        node = self.nodes[i]
        self._sync(node)
        task = node.sched.table.claim(node.clock())
        if task is not None:
            assert isinstance(task, Held)
            if task.status is Status.QUEUED:
                task.engine.start(task)
            node.held.append(task)

    @rule(i=st.integers(0, NODES - 1), k=st.integers(0, 3), ok=st.booleans())
    def complete(self, i: int, k: int, ok: bool) -> None:
        node = self.nodes[i]
        if node.held:
            self._sync(node)
            task = node.held.pop(k % len(node.held))
            node.sched.table.complete(task, None if ok else ValueError("x"), node.clock(),
                                      node.clock())  # fmt: skip
            self.runs += 1

    @rule(i=st.integers(0, NODES - 1))
    def kill(self, i: int) -> None:
        """SIGKILL: the node's runs end with it; its leases stay until taken over."""
        self.nodes[i] = Node(self.store, self.time, 0)

    @invariant()
    def never_more_than_the_size(self) -> None:
        held = sum(len(node.held) for node in self.nodes)
        size, used = self.store.pools()["warehouse"]
        assert size == SIZE
        assert held <= used <= SIZE  # (used: the dead nodes' leases too, until taken over)

    @invariant()
    def a_run_waits_only_while_the_pool_is_full(self) -> None:
        waiting = [
            info for info in self.nodes[0].sched.tasks() if info.status is Status.QUEUED
            and info.waiting_for == ("pool:warehouse",)
        ]  # fmt: skip
        if waiting:
            assert self.store.pools()["warehouse"][1] == SIZE

    def teardown(self) -> None:
        """Every node's runs end; after a lease, one node drains what is due: nothing
        stays leased, and the pool is empty once every run it took is done."""
        for node in self.nodes:
            for task in node.held:
                node.sched.table.complete(task, None, self.time(), self.time())
            node.held.clear()
        self.time.advance(LEASE + 1)
        drain = Node(self.store, self.time, 0)
        for _ in range(10_000):  # (catch-up: every slot missed runs)
            task = drain.sched.table.claim(drain.clock())
            if task is None:
                break
            if task.status is Status.QUEUED:
                task.engine.start(task)
            drain.sched.table.complete(task, None, drain.clock(), drain.clock())
        assert task is None
        assert self.store.pools() == {"warehouse": (SIZE, 0)}
        assert all(row.owner is None for row in self.store.rows())


TestPoolProtocol = PoolProtocol.TestCase
TestPoolProtocol.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
