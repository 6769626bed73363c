"""AsyncRunner: drives a Scheduler inside a running asyncio event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from rota._core.events import Event, EventKind
from rota._core.task import Task, run_at
from rota._core.types import RunCancelled, RunOutcome, Status, Time
from rota._scheduling.scheduler import Scheduler

from .driver import CLOCK_RETRY, NO_FAULT, Driver, OnOutcome, logger

CANCEL_GRACE = 1.0
"""Real seconds a coroutine cancelled at shutdown has to unwind; one that
ignores the cancellation is then abandoned (its run reported as failed)."""


class AsyncRunner(Driver):
    """Runs a :class:`~rota.Scheduler`'s tasks inside a running asyncio loop.

    ``async with AsyncRunner(scheduler):`` starts dispatching and, on exit,
    stops and awaits the runs in progress. It wakes through the loop's own
    timers (``loop.call_at``), taking the scheduler's clock to count seconds;
    scheduling from another thread wakes it through
    ``loop.call_soon_threadsafe``. With a :class:`~rota.ManualClock`, it
    wakes when the clock is moved.

    A plain action runs on the loop, like any callback: keep it short, or
    pass ``executor=`` to run plain actions off the loop (the task is
    ``queued`` until a worker starts it). An action that returns an awaitable
    (an ``async def`` action) is awaited as its own asyncio task, so a slow
    coroutine delays no other task; its exception is the run's failure, with
    retries as usual. A fixed-rate task never overlaps itself (unless its
    ``overlap=`` policy says so: ``Overlap.allow(n)``, ``REPLACE``). A task
    cancelled (``cancel()`` on this scheduler) while its coroutine runs has
    that coroutine cancelled: ``CancelledError`` is raised at its next
    ``await`` (it may clean up, as asyncio's cancellation always allows), and
    its run ends in :class:`~rota.RunCancelled`, logged at INFO, not as a
    failure. A plain action on a thread cannot be stopped: it runs to its end.

    ``on_outcome(outcome)`` is called on the loop's thread, once per run, one
    task's in the order its runs ended (also for runs that ran on a worker,
    and on a durable scheduler, whose completions are committed on a thread
    of their own, once committed); an exception from it is logged and
    changes nothing. Failed runs are
    logged at WARNING (logger ``rota``). ``shutdown_timeout`` (real
    seconds) bounds how long exiting waits for runs in progress before
    cancelling the coroutines among them (a cancelled run is reported as
    ``failed`` with ``CancelledError``; a thread cannot be cancelled). A
    coroutine that ignores its cancellation for :data:`CANCEL_GRACE` more
    seconds is abandoned: its run is reported failed then, and whatever it
    does later is not reported again. So exiting takes at most
    ``shutdown_timeout + CANCEL_GRACE``, except for plain actions already
    running on worker threads.

    Faults are handled as by :class:`~rota.Runner`: a fatal
    ``BaseException`` from an action (plain or ``async def``) or a policy is
    recorded as its run's failure, logged, and stops the runner, and
    :meth:`stop` (so the end of ``async with``) re-raises it.

    Raises ``TypeError`` for a ``scheduler`` that is not a Scheduler, an
    ``executor`` that is not an Executor, a non-callable ``on_outcome`` or a
    non-number ``shutdown_timeout``; ``ValueError`` for a negative or
    infinite ``shutdown_timeout``.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        executor: concurrent.futures.Executor | None = None,
        on_outcome: OnOutcome | None = None,
        shutdown_timeout: float = 10.0,
    ) -> None:
        super().__init__(scheduler, executor, on_outcome)
        if not isinstance(shutdown_timeout, int | float) or isinstance(shutdown_timeout, bool):
            raise TypeError(f"shutdown_timeout must be a number, got {shutdown_timeout!r}")
        if not 0 <= shutdown_timeout < math.inf:
            raise ValueError(
                f"shutdown_timeout must be a finite number >= 0, got {shutdown_timeout!r}"
            )
        self._shutdown_timeout = float(shutdown_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._wake_lock = threading.Lock()
        self._wake_pending = False
        self._drop_queued = False
        self._runs: set[asyncio.Future[Any]] = set()
        self._reports = 0  # reports sent to the loop from other threads, not yet made
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._unsubscribe: list[Any] = []
        self._virtual = hasattr(self._clock, "on_change")

    async def __aenter__(self) -> AsyncRunner:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def is_running(self) -> bool:
        """True from :meth:`start` to :meth:`stop` (or a fatal error), while its loop is open."""
        loop = self._loop
        return loop is not None and not self._stopping and not loop.is_closed()

    def start(self) -> None:
        """Start dispatching on the running loop. O(1).

        Raises ``RuntimeError`` outside a running loop, or if started (or
        stopped) before; what the clock raises (or ``TypeError``/``ValueError``
        for a reading that is not a finite number), before anything starts.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not None or self._stopping:
            raise RuntimeError("this AsyncRunner was already started or stopped; create a new one")
        self._first_reading()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._unsubscribe.append(self._table.subscribe(self._on_new_head))
        self._unsubscribe.append(
            self._scheduler.add_listener(
                self._on_cancelled, EventKind.TASK_REMOVED, EventKind.RUN_REPLACED
            )
        )
        if self._virtual:
            self._unsubscribe.append(self._clock.on_change(self._wake))  # type: ignore[attr-defined]
        self._wake()
        self._started_event()

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop dispatching and await the runs in progress.

        Waits up to ``timeout`` real seconds (default: ``shutdown_timeout``)
        for every run, including coroutines that worker threads hand back
        meanwhile; then cancels the coroutines still running and gives them
        :data:`CANCEL_GRACE` seconds to end, abandoning (and reporting as
        failed) any that ignore it. Runs still queued in the executor will not
        start. Idempotent. Returns ``True`` if every run finished by itself.

        Cost: O(runs in progress), besides the waiting. Raises the fatal
        error that stopped the runner, if one did (once).
        """
        self._halt()
        if self._unsubscribe:  # the first stop() of a started runner
            self._stopped_event()
        while self._unsubscribe:
            self._unsubscribe.pop()()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        finished = await self._await_runs(self._shutdown_timeout if timeout is None else timeout)
        while self._reports:  # sent by other threads before their runs ended: made next
            await asyncio.sleep(0)
        if not finished:
            # Coroutines are cancelled (reported as failed); runs still queued in the
            # executor will not start; a worker thread already running cannot be stopped.
            self._drop_queued = True
            coroutines = [run for run in self._others() if isinstance(run, asyncio.Task)]
            for run in coroutines:
                run.cancel()
            if coroutines:
                _, ignoring = await asyncio.wait(coroutines, timeout=CANCEL_GRACE)
                for run in ignoring:
                    self._abandon_coroutine(run)
        self._raise_fatal()
        return finished

    def _deliver(self, report: Callable[[RunOutcome], None], outcome: RunOutcome) -> None:
        """Make a finished run's report on the loop's thread: one finished on another
        (a worker, a durable scheduler's committer) is sent there. O(1)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            report(outcome)
            return
        with self._wake_lock:
            self._reports += 1
        try:
            loop.call_soon_threadsafe(self._make_report, report, outcome)
        except RuntimeError:  # the loop is closed: reported here rather than never
            self._make_report(report, outcome)

    def _make_report(self, report: Callable[[RunOutcome], None], outcome: RunOutcome) -> None:
        try:
            report(outcome)
        finally:
            with self._wake_lock:
                self._reports -= 1

    def _others(self) -> set[asyncio.Future[Any]]:
        """The runs in progress but the caller's own."""
        return {run for run in self._runs if run is not asyncio.current_task()}

    async def _await_runs(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every run, also those added while waiting."""
        assert self._loop is not None
        deadline = self._loop.time() + timeout
        while runs := self._others():
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait(runs, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        return True

    def _abandon_coroutine(self, run: asyncio.Future[Any]) -> None:
        """Report a coroutine run that ignored its cancellation, once, as failed."""
        task: Task = getattr(run, "rota_task")  # noqa: B009 - set by _await
        logger.error("the run of task %r ignored its cancellation; abandoned", task.task_id)
        self._runs.discard(run)
        self._abandoned.add(run)
        self._complete(task, asyncio.CancelledError("abandoned at shutdown"), self._now())

    def _on_cancelled(self, event: Event) -> None:
        """A task was cancelled, or a run of it replaced (``Overlap.REPLACE``; on any
        thread): cancel its coroutine (the replaced run's only), on the loop."""
        loop = self._loop
        if loop is not None:
            at = event.at if event.kind is EventKind.RUN_REPLACED else None
            with contextlib.suppress(RuntimeError):  # a closed loop runs nothing more
                loop.call_soon_threadsafe(self._cancel_runs_of, event.task_id, at)

    def _cancel_runs_of(self, task_id: object, at: object = None) -> None:
        """Cancel the coroutine runs of ``task_id`` if it is still cancelled (not
        scheduled again meanwhile), or, given ``at``, its run at ``at`` (replaced).
        O(runs in progress)."""
        if at is None and self._scheduler.status(task_id) is not Status.CANCELLED:
            return
        for run in self._runs:
            task = getattr(run, "rota_task", None)
            if not isinstance(run, asyncio.Task) or task is None or task.task_id != task_id:
                continue
            if at is None or run_at(task) == at:
                run.rota_cancelled = True  # type: ignore[attr-defined]
                run.cancel()

    # -- waking ------------------------------------------------------------

    def _on_new_head(self, head: Time) -> None:
        self._wake()

    def _poke(self) -> None:
        self._wake()

    def _wake(self) -> None:
        """Ask the loop to re-check the queue soon; coalesced, callable from any thread."""
        loop = self._loop
        if loop is None or self._stopping:
            return
        with self._wake_lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        if threading.get_ident() == self._loop_thread:
            loop.call_soon(self._dispatch)
        else:
            with contextlib.suppress(RuntimeError):  # a closed loop has nothing to wake
                loop.call_soon_threadsafe(self._dispatch)

    def _dispatch(self) -> None:
        """Run or hand off every due run, then arm a timer for the next one. A look
        that raises (a store down, a clock or policy that raises) is tried again
        after :data:`CLOCK_RETRY`: no ``Exception`` leaves the loop unarmed."""
        with self._wake_lock:
            self._wake_pending = False
        if self._stopping:
            return
        try:
            self._dispatch_due()
        except Exception as exc:
            self._look_failed("claiming due runs", exc)
        try:
            self._arm()
        except Exception as exc:
            self._look_failed("reading the next run's time", exc)
            self._arm_retry()
        else:
            if self._fault is not NO_FAULT and not self._retry_soon:
                self._fault = NO_FAULT

    def _arm_retry(self) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._retry_soon = False
        self._timer = self._loop.call_later(CLOCK_RETRY, self._dispatch)

    def _arm(self) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        head = self._table.wake_time()
        if self._stopping:
            return
        if self._retry_soon:  # look again in a while
            self._arm_retry()
            return
        if head is None or self._full:  # nothing due, or the pool has enough (see _poke)
            return
        delay = head - self._now()
        if self._retry_soon:
            self._retry_soon = False
            delay = CLOCK_RETRY
        if delay <= 0:
            self._wake()
        elif not self._virtual:
            self._timer = self._loop.call_at(self._loop.time() + delay, self._dispatch)

    # -- running -------------------------------------------------------------

    def _run_here(self, task: Task) -> None:
        handed = self._process(task, awaitables=True)
        if handed is not None:
            self._await(task, *handed)

    def _await(self, task: Task, awaitable: Awaitable[Any], started: Time) -> None:
        assert self._loop is not None
        try:
            run = asyncio.ensure_future(self._finish(task, awaitable, started), loop=self._loop)
        except BaseException as exc:  # cannot even be wrapped: that is the run's failure
            self._complete(task, exc, started)
            return
        run.rota_task = task  # type: ignore[attr-defined]
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def _finish(self, task: Task, awaitable: Awaitable[Any], started: Time) -> None:
        error: BaseException | None = None
        try:
            value = await awaitable
            if value is not None:
                task.value = value
        except BaseException as exc:  # the run's failure; reported (fatal: stops the runner)
            error = exc
        current = asyncio.current_task()
        stopped = getattr(current, "rota_cancelled", False)  # set by _cancel_runs_of
        if stopped and isinstance(error, asyncio.CancelledError):
            replaced = getattr(task, "replaced", False)  # a Run: Overlap.REPLACE stopped it
            why = "replaced by its next slot" if replaced else "cancelled"
            error = RunCancelled(f"task {task.task_id!r} was {why} while its coroutine ran")
        if current in self._abandoned:  # reported already, when it was abandoned
            self._abandoned.discard(current)
            return
        self._complete(task, error, started)

    def _hand_off(self, task: Task) -> None:
        assert self._loop is not None
        assert self._executor is not None
        ran = [False]  # set by the worker: a future that ends without it never ran the run
        try:
            run = self._loop.run_in_executor(self._executor, self._work, task, ran)
        except Exception as exc:  # e.g. RuntimeError: cannot schedule after shutdown
            logger.error("executor refused task %r: %r", task.task_id, exc)
            self._abandon(task, exc)
            return
        self._runs.add(run)
        run.add_done_callback(lambda done: self._worked(done, task, ran))

    def _work(self, task: Task, ran: list[bool]) -> tuple[Task, Awaitable[Any], Time] | None:
        """On a worker thread: run a handed-over run, completing it here.

        Returns the awaitable (with its task and start) for the loop to await
        when the action turns out to be a coroutine function.
        """
        ran[0] = True
        if self._drop_queued:  # stopped and timed out: queued runs do not start
            self._abandon(task, asyncio.CancelledError(f"run of {task.task_id!r}"))
            return None
        if not self._table.start(task):  # cancelled while queued: never starts
            self._finished(was_running=False)
            return None
        self._started()
        handed = self._process(task, awaitables=True)
        return None if handed is None else (task, *handed)

    def _worked(self, run: asyncio.Future[Any], task: Task, ran: list[bool]) -> None:
        """Back on the loop: await the coroutine a worker's action returned, if any;
        fail the run if the executor ended it without running it."""
        if not ran[0]:
            self._never_ran(task, run)
        elif not run.cancelled() and run.exception() is None and run.result() is not None:
            self._await(*run.result())
        self._runs.discard(run)
