"""AsyncRunner: drives a Scheduler inside a running asyncio event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable
from types import TracebackType
from typing import Any

from ._driver import Driver, OnOutcome, logger
from ._engine import Task
from ._scheduler import Scheduler, fatal
from ._types import Time


class AsyncRunner(Driver):
    """Runs a :class:`~cadence.Scheduler`'s tasks inside a running asyncio loop.

    ``async with AsyncRunner(scheduler):`` starts dispatching and, on exit,
    stops and awaits the runs in progress. It wakes through the loop's own
    timers (``loop.call_at``), taking the scheduler's clock to count seconds;
    scheduling from another thread wakes it through
    ``loop.call_soon_threadsafe``. With a :class:`~cadence.ManualClock`, it
    wakes when the clock is moved.

    A plain action runs on the loop, like any callback: keep it short, or
    pass ``executor=`` to run plain actions off the loop (the task is
    ``queued`` until a worker starts it). An action that returns an awaitable
    (an ``async def`` action) is awaited as its own asyncio task, so a slow
    coroutine delays no other task; its exception is the run's failure, with
    retries as usual. A fixed-rate task never overlaps itself.

    ``on_outcome(outcome)`` is called on the loop's thread, once per run;
    an exception from it is logged and changes nothing. Failed runs are
    logged at WARNING (logger ``cadence``). ``shutdown_timeout`` (real
    seconds) bounds how long exiting waits for runs in progress before
    cancelling the coroutines among them (a cancelled run is reported as
    ``failed`` with ``CancelledError``; a thread cannot be cancelled).

    Raises ``TypeError`` for a ``scheduler`` that is not a Scheduler, an
    ``executor`` that is not an Executor, or a non-callable ``on_outcome``,
    ``ValueError`` for a negative ``shutdown_timeout``.
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
        if not isinstance(shutdown_timeout, int | float) or not shutdown_timeout >= 0:
            raise ValueError(f"shutdown_timeout must be a number >= 0, got {shutdown_timeout!r}")
        self._shutdown_timeout = float(shutdown_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._wake_lock = threading.Lock()
        self._wake_pending = False
        self._stopping = False
        self._drop_queued = False
        self._runs: set[asyncio.Future[Any]] = set()
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
        """True between :meth:`start` and :meth:`stop`."""
        return self._loop is not None and not self._stopping

    def start(self) -> None:
        """Start dispatching on the running loop. O(1).

        Raises ``RuntimeError`` outside a running loop, or if started (or stopped) before.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not None or self._stopping:
            raise RuntimeError("this AsyncRunner was already started or stopped; create a new one")
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._unsubscribe.append(self._scheduler._subscribe(self._on_new_head))
        if self._virtual:
            self._unsubscribe.append(self._clock.on_change(self._wake))  # type: ignore[attr-defined]
        self._wake()

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop dispatching and await the runs in progress.

        Waits up to ``timeout`` real seconds (default: ``shutdown_timeout``),
        then cancels the coroutines still running and awaits their ends.
        Idempotent. Returns ``True`` if every run finished by itself.
        """
        self._stopping = True
        while self._unsubscribe:
            self._unsubscribe.pop()()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        runs = {run for run in self._runs if run is not asyncio.current_task()}
        if not runs:
            return True
        wait = self._shutdown_timeout if timeout is None else timeout
        _, pending = await asyncio.wait(runs, timeout=wait)
        if not pending:
            return True
        # Coroutines are cancelled (reported as failed); runs still queued in the
        # executor will not start; a worker thread already running cannot be stopped.
        self._drop_queued = True
        coroutines = [run for run in pending if isinstance(run, asyncio.Task)]
        for run in coroutines:
            run.cancel()
        await asyncio.gather(*coroutines, return_exceptions=True)
        return False

    # -- waking ------------------------------------------------------------

    def _on_new_head(self, head: Time) -> None:
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
        """Run or hand off every due run, then arm a timer for the next one."""
        with self._wake_lock:
            self._wake_pending = False
        if self._stopping:
            return
        self._dispatch_due()
        self._arm()

    def _arm(self) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        head = self._scheduler.next_run_time()
        if head is None or self._stopping:
            return
        delay = head - self._clock()
        if delay <= 0:
            self._wake()
        elif not self._virtual:
            self._timer = self._loop.call_at(self._loop.time() + delay, self._dispatch)

    # -- running -------------------------------------------------------------

    def _run_here(self, task: Task) -> None:
        result, started = self._execute(task, awaitables=True)
        if result is None or isinstance(result, BaseException):
            self._complete(task, result, started)
            if result is not None and fatal(result):
                raise result
        else:
            self._await(task, result, started)

    def _await(self, task: Task, awaitable: Awaitable[Any], started: Time) -> None:
        assert self._loop is not None
        run = asyncio.ensure_future(self._finish(task, awaitable, started), loop=self._loop)
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def _finish(self, task: Task, awaitable: Awaitable[Any], started: Time) -> None:
        error: BaseException | None = None
        try:
            await awaitable
        except BaseException as exc:  # the run's failure; reported, not re-raised
            error = exc
        self._complete(task, error, started)

    def _hand_off(self, task: Task) -> None:
        assert self._loop is not None
        assert self._executor is not None
        try:
            run = self._loop.run_in_executor(self._executor, self._work, task)
        except Exception as exc:  # e.g. RuntimeError: cannot schedule after shutdown
            logger.error("executor refused task %r: %r", task.task_id, exc)
            self._abandon(task, exc)
            return
        self._runs.add(run)
        run.add_done_callback(self._worked)

    def _work(self, task: Task) -> tuple[Task, Awaitable[Any], Time] | None:
        """On a worker thread: run a handed-over run, completing it here.

        Returns the awaitable (with its task and start) for the loop to await
        when the action turns out to be a coroutine function.
        """
        if self._drop_queued:  # stopped and timed out: queued runs do not start
            self._abandon(task, asyncio.CancelledError(f"run of {task.task_id!r}"))
            return None
        if not self._scheduler._start(task):  # cancelled while queued: never starts
            self._finished(was_running=False)
            return None
        self._started()
        result, started = self._execute(task, awaitables=True)
        if result is None or isinstance(result, BaseException):
            self._complete(task, result, started)
            if result is not None and fatal(result):
                raise result
            return None
        return task, result, started

    def _worked(self, run: asyncio.Future[Any]) -> None:
        """Back on the loop: await the coroutine a worker's action returned, if any."""
        self._runs.discard(run)
        if not run.cancelled() and run.exception() is None and run.result() is not None:
            self._await(*run.result())
