"""Runner: drives a Scheduler in real time from a dispatcher thread."""

from __future__ import annotations

import concurrent.futures
import math
import signal
import threading
import time
from collections.abc import Callable
from types import TracebackType

from rota._core.task import Task
from rota._core.types import Time
from rota._scheduling.scheduler import Scheduler

from .driver import CLOCK_RETRY, NO_FAULT, Driver, OnOutcome, logger

MAX_SLEEP = 86_400.0
"""The longest the dispatcher sleeps in one wait (real seconds): below
``threading.TIMEOUT_MAX`` on every platform, so a run due in 300 years is
slept towards a day at a time instead of killing the dispatcher."""


class _Terminated(Exception):  # noqa: N818 - a signal, not an error
    """Raised in the main thread by SIGTERM while :meth:`Runner.run_forever` waits."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


class Runner(Driver):
    """Runs a :class:`~rota.Scheduler`'s tasks in real time, from a dispatcher thread.

    The dispatcher sleeps on a condition variable until the next run is due,
    reading time only through the scheduler's clock, taken to count seconds.
    It does not poll: a task scheduled earlier than the one it sleeps for,
    from any thread or action, wakes it at once, and so does :meth:`stop`.
    With a :class:`~rota.ManualClock` it sleeps until the clock is moved,
    so tests can step a real runner without sleeping.

    Without an ``executor``, actions run on the dispatcher thread, one at a
    time. With one (any ``concurrent.futures.Executor``), due runs are
    handed to it: the task is ``queued`` until a worker starts it, a slow
    action delays no other task, and a fixed-rate task never overlaps itself
    (its next slot is queued when its run completes and then catches up in
    order), unless its ``overlap=`` policy lets it (``Overlap.allow(n)``). A
    cancelled queued run never starts. If the executor refuses work (it was
    shut down), or drops a queued run, the run fails visibly with that
    error (and is retried as usual). On a :class:`~rota.DurableScheduler`
    with a ``ThreadPoolExecutor``, runs are claimed in step with the workers
    (at most one pool's worth waiting), leaving other due runs to other nodes.

    ``on_outcome(outcome)`` is called once per run, outside every lock, on the
    thread that ran it (on a durable scheduler with group commit: on its
    committer thread, once the completion is committed), one task's in the
    order its runs ended (a report whose task's previous one is still being
    made waits, and is made by that thread next); an exception from it is
    logged and changes nothing.
    Failed runs are logged with their traceback at WARNING (logger
    ``rota``), retried ones at INFO. Every outcome's ``started`` is the
    clock's reading when the action started; :meth:`stats` gives lag
    percentiles.

    A runner is started once (like a thread); ``with Runner(s) as r:``
    starts it and stops it, waiting, on exit. The dispatcher is a daemon
    thread: it does not keep the process alive by itself.

    Faults: an action, policy or ``on_outcome`` that raises an ``Exception``
    affects only its run; a clock that raises or returns garbage is logged
    and retried every second, the last good reading standing in; an executor
    that refuses, drops or fails a run without running it fails that run. A
    fatal ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``, ...) from an
    action or policy is recorded as its run's failure, logged at ERROR, and
    stops the runner; :meth:`stop` then re-raises it.

    Raises ``TypeError`` for a ``scheduler`` that is not a Scheduler, an
    ``executor`` that is not an Executor (or is a ``ProcessPoolExecutor``,
    which cannot complete runs in this process), or a non-callable
    ``on_outcome``.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        executor: concurrent.futures.Executor | None = None,
        on_outcome: OnOutcome | None = None,
    ) -> None:
        super().__init__(scheduler, executor, on_outcome)
        self._cond_lock = threading.Lock()  # entered instead of _cond: see Driver._flight_lock
        self._cond = threading.Condition(self._cond_lock)
        self._target: Time = -math.inf  # the time the dispatcher sleeps until, while it does
        self._news: Time = math.inf  # the earliest head announced since the dispatcher looked
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

        Raises ``RuntimeError`` if this runner was started (or stopped)
        before; what the clock raises (or ``TypeError``/``ValueError`` for a
        reading that is not a finite number), before anything starts.
        """
        with self._cond_lock:
            if self._thread is not None or self._stopping:
                raise RuntimeError("this Runner was already started or stopped; create a new one")
            self._first_reading()
            self._thread = threading.Thread(target=self._serve, name="rota-runner", daemon=True)
        self._unsubscribe.append(self._table.subscribe(self._on_new_head))
        if self._virtual:
            self._unsubscribe.append(self._clock.on_change(self._poke))  # type: ignore[attr-defined]
        self._thread.start()
        self._started_event()

    def stop(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop dispatching; with ``wait``, wait for the runs in progress.

        Idempotent. No run is claimed once it has returned (a claim racing
        with it either happened before or never does). With ``wait``, returns
        once the dispatcher has ended and no run of this runner is in
        flight, or after ``timeout`` real seconds. Safe from anywhere: called
        from inside one of this runner's runs (an action or ``on_outcome``,
        on the dispatcher or a worker) it does not wait, since the runs it
        would wait for may need the very thread it blocks. Returns ``True``
        if nothing but the caller's own run is in flight, ``False`` if
        something still is (on timeout, with ``wait=False``, or from inside).

        Cost: O(1), besides the waiting. Raises the fatal error that stopped
        the runner, if one did (once, to the first caller outside the
        runner's runs).
        """
        self._halt()
        with self._cond_lock:
            self._cond.notify_all()
            unsubscribe, self._unsubscribe = self._unsubscribe, []
        for undo in unsubscribe:
            undo()
        if unsubscribe:  # the first stop() of a started runner
            self._stopped_event()
        thread = self._thread
        if self._is_inside() or thread is threading.current_thread():
            return self._in_flight() <= 1
        if not wait:
            return self._in_flight() == 0
        deadline = None if timeout is None else time.monotonic() + timeout
        if thread is not None:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
        idle = self._wait_idle(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._raise_fatal()
        return idle

    def run_forever(self, *, signals: bool = True) -> None:
        """Start (if need be) and block until the runner stops; then stop cleanly.

        For scripts and services whose main job is the schedule: the
        dispatcher is a daemon thread, so a script that returns after
        ``start()`` stops running tasks. Returns after SIGINT (Ctrl-C) or
        SIGTERM (with ``signals``, when called from the main thread, a SIGTERM
        handler is installed for the duration and the previous one restored),
        after :meth:`stop` from another thread or an action, or after a fatal
        error, which it re-raises. Each way it stops as :meth:`stop` does,
        waiting for runs in progress.

        Cost: blocks; it wakes every half second to notice signals. Raises
        ``RuntimeError`` if this runner was stopped before.
        """
        if self._stopping:
            raise RuntimeError("this Runner was stopped; create a new one")
        previous = None
        if signals and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _terminate)  # before any run starts
        try:
            if self._thread is None:
                self.start()
            thread = self._thread
            assert thread is not None
            while thread.is_alive():
                thread.join(0.5)  # bounded, so a signal is seen promptly
        except (KeyboardInterrupt, _Terminated):
            logger.info("signal received: stopping (waiting for runs in progress)")
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self.stop(wait=True)

    def _halt(self) -> None:
        super()._halt()
        with self._cond_lock:
            self._cond.notify_all()

    # -- the dispatcher --------------------------------------------------

    def _on_new_head(self, head: Time) -> None:
        # Without the lock when it cannot matter: not before the time the dispatcher
        # sleeps until, nor before a head already announced since it looked (the
        # announcing thread pushed the run first, so a look that starts after this
        # read sees it).
        if head >= self._target and head >= self._news:
            return
        with self._cond_lock:
            self._news = min(self._news, head)
            if head < self._target:
                self._cond.notify()

    def _poke(self) -> None:
        with self._cond_lock:
            self._cond.notify()

    def _serve(self) -> None:
        """The dispatcher thread. Whatever ends it but :meth:`stop` is this runner's
        fatal error, raised by :meth:`stop` and :meth:`run_forever`."""
        try:
            self._loop()
        except BaseException as exc:
            self._dispatcher_ended(exc)
        finally:
            self._table.thread_done()

    def _loop(self) -> None:
        # The head is read outside the lock (a durable scheduler reads its store), so
        # threads announcing new heads (_on_new_head) never wait on that read; a head
        # announced meanwhile that is earlier than the one read means: look again.
        # A look that raises (a store down, a clock or policy that raises) is retried
        # after CLOCK_RETRY: nothing but stop() or a fatal error ends this loop.
        table = self._table
        while True:
            try:
                self._dispatch_due()
            except Exception as exc:
                self._look_failed("claiming due runs", exc)
            with self._cond_lock:
                self._news = math.inf
            full = self._full
            try:
                head = None if full else table.wake_time()
            except Exception as exc:
                self._look_failed("reading the next run's time", exc)
                head = None
            else:
                if self._fault is not NO_FAULT and not self._retry_soon:
                    self._fault = NO_FAULT  # looks work again: a new failure is logged
            with self._cond_lock:
                if self._stopping:
                    return
                if self._retry_soon:  # wait a while, then look again
                    self._retry_soon = False
                    timeout: float | None = CLOCK_RETRY
                elif full:  # the pool has enough runs: a finishing run pokes us
                    if not self._full:  # one finished while we looked
                        continue
                    timeout = MAX_SLEEP
                elif head is None:
                    if self._news < math.inf:
                        continue
                    timeout = None
                else:
                    if self._news < head:
                        continue
                    timeout = head - self._now()
                    if self._retry_soon:
                        continue
                    if timeout <= 0:
                        continue
                    timeout = None if self._virtual else min(timeout, MAX_SLEEP)
                # (a full pool waits for a poke: no head can wake it)
                self._target = -math.inf if full else math.inf if head is None else head
                self._cond.wait(timeout)
                self._target = -math.inf

    def _run_here(self, task: Task) -> None:
        self._process(task, linger=True)  # this thread claims again once it returns

    def _hand_off(self, task: Task) -> None:
        assert self._executor is not None
        ran = [False]  # set by the worker: a future that ends without it never ran the run
        try:
            future = self._executor.submit(self._work, task, ran)
        except Exception as exc:  # e.g. RuntimeError: cannot schedule after shutdown
            logger.error("executor refused task %r: %r", task.task_id, exc)
            self._abandon(task, exc)
            return
        future.add_done_callback(lambda f: self._dropped(f, task, ran))

    def _dropped(
        self, future: concurrent.futures.Future[None], task: Task, ran: list[bool]
    ) -> None:
        """A future ended: if the executor never ran the run, fail it so it never sticks."""
        if not ran[0]:  # e.g. executor.shutdown(cancel_futures=True), a lost worker
            self._never_ran(task, future)

    def _work(self, task: Task, ran: list[bool]) -> None:
        """Run a handed-over run on a worker thread."""
        ran[0] = True
        if not self._table.start(task):  # cancelled while queued: never starts
            self._finished(was_running=False)
            return
        self._started()
        self._process(task)
