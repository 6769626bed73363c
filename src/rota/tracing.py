"""OpenTelemetry spans per run (extra ``rota[otel]``: the OpenTelemetry API only).

With the API installed, every run is a span ``rota.run`` (attributes ``rota.job``,
``rota.slot``, ``rota.attempt``, ``rota.key``, ``rota.lag_s``, ``rota.result``; the
exception recorded), current while the action runs, so its context reaches the
work: :func:`inject` puts it in a carrier (``traceparent``/``tracestate``), which
a command job gets as ``TRACEPARENT``/``TRACESTATE`` (:func:`environ`), an HTTP job
as headers, a hand-off in its queue message's headers. Configure OpenTelemetry the
usual way (the SDK in the library, or ``OTEL_*`` with a distro): without a
configured provider the API's spans are no-ops. Without the extra, nothing is
imported and a run pays one test of a module constant (:data:`ACTIVE`).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, MutableMapping
from typing import Any

ACTIVE = importlib.util.find_spec("opentelemetry") is not None
"""Whether the OpenTelemetry API is installed (runs are spans only then)."""

SPAN = "rota.run"
"""The name of a run's span."""

_tracer: Any = None  # rota's tracer, got once (the API's proxy follows a provider set later)


@contextlib.contextmanager
def run_span(job: object, slot: float, attempt: int, lag: float) -> Iterator[Any]:
    """The span of one run, current inside the block; yields it (``None`` without the
    API). An exception leaving the block is recorded on it and re-raised; set
    ``rota.result`` on it with :func:`ended`. Cost without a provider: the API's
    no-op span (sub-microsecond)."""
    if not ACTIVE:
        yield None
        return
    global _tracer  # noqa: PLW0603 (one tracer for the process, got on first use)
    if _tracer is None:
        from opentelemetry import trace

        _tracer = trace.get_tracer("rota")
    tracer = _tracer
    attributes: dict[str, str | float | int] = {
        "rota.job": str(job), "rota.slot": float(slot), "rota.attempt": int(attempt),
        "rota.key": f"{job}@{float(slot)!r}", "rota.lag_s": float(lag),
    }  # fmt: skip
    with tracer.start_as_current_span(SPAN, attributes=attributes) as span:
        yield span


def ended(span: Any, result: str, error: BaseException | None) -> None:
    """Mark a run's span with its result (and its error as an exception event)."""
    if span is None:
        return
    span.set_attribute("rota.result", result)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


def inject(carrier: MutableMapping[str, str]) -> None:
    """Put the current context (the run's span, inside an action) in ``carrier`` as
    W3C ``traceparent``/``tracestate`` (the configured propagator's keys); nothing
    without the API or outside a span."""
    if ACTIVE:
        from opentelemetry import propagate

        propagate.inject(carrier)


def environ() -> dict[str, str]:
    """The current context as a child process's variables: ``TRACEPARENT`` (and
    ``TRACESTATE``), as the OpenTelemetry environment-carrier convention names them."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return {name.upper(): value for name, value in carrier.items()}
