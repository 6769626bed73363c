"""Calling a claimed run's action: what it returned, and what an interrupt means.

The one implementation every table and runner shares (:meth:`Tasks.call
<rota._scheduling.tasks.Tasks.call>` calls :func:`invoke`); drivers ask
:func:`fatal` whether to re-raise a run's error after completing it.
"""

from __future__ import annotations

import inspect
from typing import Any

from rota._core.task import Task
from rota._core.types import Time


def fatal(error: BaseException) -> bool:
    """True for a ``BaseException`` that is not an ``Exception`` (e.g. ``KeyboardInterrupt``).

    Drivers complete the run (as failed, without retry) and then re-raise it.
    """
    return not isinstance(error, Exception)


def failed(task: Task, at: Time, error: BaseException) -> BaseException:
    """``error``, the one a run failed with; an interrupt noted as such (the driver
    re-raises it after completing the run)."""
    if fatal(error):
        error.add_note(f"rota: the run of task {task.task_id!r} at {at!r} was recorded as failed")
    return error


def invoke(task: Task, at: Time, awaitables: bool) -> Any:
    """Call ``task``'s action for ``at``: ``None`` on success (its value kept on the
    task), the exception it raised (:func:`failed`), or the awaitable it returned
    when ``awaitables`` is true. A plain driver cannot await one: then it is closed
    and the run fails with ``TypeError``. Never raises."""
    try:
        result = task.action(at)
        if result is None:
            return None
        if not inspect.isawaitable(result):
            task.value = result
            return None
        if awaitables:
            return result
        error = TypeError(
            f"action of task {task.task_id!r} returned an awaitable "
            f"({type(result).__name__}); run async actions under AsyncRunner"
        )
        close = getattr(result, "close", None)
        if close is not None:
            close()  # no "never awaited" warning; if it raises, that is the error
        return error
    except BaseException as exc:
        return failed(task, at, exc)
