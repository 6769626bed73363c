"""Runner: drives a Scheduler in real time from a dispatcher thread."""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType

from ._driver import Driver, OnOutcome, logger
from ._engine import Task
from ._scheduler import Scheduler, fatal
from ._types import Time


class Runner(Driver):
    """Runs a :class:`~cadence.Scheduler`'s tasks in real time, from a dispatcher thread.

    The dispatcher sleeps on a condition variable until the next run is due,
    reading time only through the scheduler's clock, taken to count seconds.
    It does not poll: a task scheduled earlier than the one it sleeps for,
    from any thread or action, wakes it at once, and so does :meth:`stop`.
    With a :class:`~cadence.ManualClock` it sleeps until the clock is moved,
    so tests can step a real runner without sleeping.

    Without an ``executor``, actions run on the dispatcher thread, one at a
    time. With one (any ``concurrent.futures.Executor``), due runs are
    handed to it: the task is ``queued`` until a worker starts it, a slow
    action delays no other task, and a fixed-rate task never overlaps itself
    (its next slot is queued when its run completes and then catches up in
    order). A cancelled queued run never starts. If the executor refuses work
    (it was shut down), or drops a queued run, the run fails visibly with that
    error (and is retried as usual).

    ``on_outcome(outcome)`` is called once per run, outside every lock, on the
    thread that ran it; an exception from it is logged and changes nothing.
    Failed runs are logged with their traceback at WARNING (logger
    ``cadence``), retried ones at INFO. Every outcome's ``started`` is the
    clock's reading when the action started; :meth:`stats` gives lag
    percentiles.

    A runner is started once (like a thread); ``with Runner(s) as r:``
    starts it and stops it, waiting, on exit.

    Raises ``TypeError`` for a ``scheduler`` that is not a Scheduler, an
    ``executor`` that is not an Executor, or a non-callable ``on_outcome``.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        executor: concurrent.futures.Executor | None = None,
        on_outcome: OnOutcome | None = None,
    ) -> None:
        super().__init__(scheduler, executor, on_outcome)
        self._cond = threading.Condition(threading.Lock())
        self._target: Time = -math.inf  # the time the dispatcher sleeps until, while it does
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._virtual = hasattr(self._clock, "on_change")

    def __enter__(self) -> Runner:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(wait=True)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped" if self._stopping else "new"
        return f"<Runner {state} in_flight={self._in_flight()}>"

    @property
    def is_running(self) -> bool:
        """True between :meth:`start` and the end of the dispatcher thread."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

    def start(self) -> None:
        """Start the dispatcher thread. O(1).

        Raises ``RuntimeError`` if this runner was started (or stopped) before.
        """
        with self._cond:
            if self._thread is not None or self._stopping:
                raise RuntimeError("this Runner was already started or stopped; create a new one")
            self._thread = threading.Thread(target=self._loop, name="cadence-runner", daemon=True)
        self._unsubscribe.append(self._scheduler._subscribe(self._on_new_head))
        if self._virtual:
            self._unsubscribe.append(self._clock.on_change(self._poke))  # type: ignore[attr-defined]
        self._thread.start()

    def stop(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop dispatching; with ``wait``, wait for the runs in progress.

        Idempotent, and safe to call from anywhere, an action of this runner
        included (it never joins its own thread, and does not wait for the
        caller's own run). No new run is claimed after it is called. With
        ``wait``, returns once the dispatcher has ended and no action of this
        runner is executing (but the caller's), or after ``timeout`` real
        seconds; returns ``True`` if everything finished, ``False`` on
        timeout (or with ``wait=False`` while work is still in flight).
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            unsubscribe, self._unsubscribe = self._unsubscribe, []
        for undo in unsubscribe:
            undo()
        thread = self._thread
        if not wait:
            return self._in_flight() == 0 and (thread is None or not thread.is_alive())
        deadline = None if timeout is None else time.monotonic() + timeout
        if thread is not None and thread is not threading.current_thread():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
        return self._wait_idle(None if deadline is None else max(0.0, deadline - time.monotonic()))

    # -- the dispatcher --------------------------------------------------

    def _on_new_head(self, head: Time) -> None:
        with self._cond:
            if head < self._target:
                self._cond.notify()

    def _poke(self) -> None:
        with self._cond:
            self._cond.notify()

    def _loop(self) -> None:
        clock, scheduler = self._clock, self._scheduler
        while True:
            self._dispatch_due()
            with self._cond:
                if self._stopping:
                    return
                head = scheduler.next_run_time()
                if head is None:
                    timeout = None
                else:
                    timeout = head - clock()
                    if timeout <= 0:
                        continue
                    if self._virtual:
                        timeout = None
                self._target = math.inf if head is None else head
                self._cond.wait(timeout)
                self._target = -math.inf

    def _run_here(self, task: Task) -> None:
        error, started = self._execute(task)
        self._complete(task, error, started)
        if error is not None and fatal(error):
            logger.error("task %r raised %r: the runner stops", task.task_id, error)
            self.stop(wait=False)
            raise error

    def _hand_off(self, task: Task) -> None:
        assert self._executor is not None
        try:
            future = self._executor.submit(self._work, task)
        except Exception as exc:  # e.g. RuntimeError: cannot schedule after shutdown
            logger.error("executor refused task %r: %r", task.task_id, exc)
            self._abandon(task, exc)
            return
        future.add_done_callback(lambda f: self._dropped(f, task))

    def _dropped(self, future: concurrent.futures.Future[None], task: Task) -> None:
        if future.cancelled():  # e.g. executor.shutdown(cancel_futures=True)
            self._abandon(task, concurrent.futures.CancelledError(f"run of {task.task_id!r}"))

    def _work(self, task: Task) -> None:
        """Run a handed-over run on a worker thread."""
        if not self._scheduler._start(task):  # cancelled while queued: never starts
            self._finished(was_running=False)
            return
        self._started()
        error, started = self._execute(task)
        self._complete(task, error, started)
        if error is not None and fatal(error):
            raise error
