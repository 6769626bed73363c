"""OpenTelemetry spans per run (extra ``rota[otel]``: the OpenTelemetry API only).

With the API installed, every run is a span ``rota.run`` (attributes ``rota.job``,
``rota.slot``, ``rota.attempt``, ``rota.key``, ``rota.lag_s``, ``rota.result``; the
exception recorded), current while the action runs, so its context reaches the
work: :func:`inject` puts it in a carrier (``traceparent``/``tracestate``), which
a command job gets as ``TRACEPARENT``/``TRACESTATE`` (:func:`environ`), an HTTP job
as headers, a hand-off in its queue message's headers. Configure OpenTelemetry the
usual way (the SDK in the library, or ``OTEL_*`` with a distro): without a
configured provider the API's spans are no-ops. Without the extra, nothing is
imported and a run pays one test of a module constant (:data:`ACTIVE`); without a
configured provider, a look at the global one (:func:`current`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import math
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

ACTIVE = importlib.util.find_spec("opentelemetry") is not None
"""Whether the OpenTelemetry API is installed (runs are spans only then)."""

SPAN = "rota.run"
"""The name of a run's span."""

_tracer: Any = None  # rota's tracer from _provider (None: it makes no span)
_provider: Any = None  # the global provider _tracer was decided for
log = logging.getLogger("rota.tracing")


def current() -> Any:
    """rota's tracer from the configured provider, or ``None`` when the API is not
    installed or no provider is configured (the API's default, or a no-op one): then
    a run makes no span at all. A look at the global provider, decided again only
    when it changed: a fraction of a microsecond. A provider that fails is logged and
    treated as none."""
    if not ACTIVE:
        return None
    global _tracer, _provider
    try:
        api = _api()
        provider = api.get_tracer_provider()
        if provider is _provider:
            return _tracer
        tracer = None
        if not isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
            found = provider.get_tracer("rota")
            tracer = None if isinstance(found, api.NoOpTracer) else found
        _tracer, _provider = tracer, provider
        return tracer
    except Exception:
        log.warning("rota: no tracer from the OpenTelemetry provider; runs make no span",
                    exc_info=True)  # fmt: skip
        return None


@functools.cache
def _api() -> Any:
    """The API's trace module, imported at the first look (not with rota)."""
    from opentelemetry import trace

    return trace


def traced(
    call: Callable[[], Any], job: object, slot: float, attempt: int, lag: Callable[[], float]
) -> Any:
    """``call()`` (an action's call: ``None``, its exception or an awaitable) inside the
    run's span when a tracer is configured (:func:`current`); returns what it returned.

    The span never changes the run: a tracer that fails to start one is logged and
    the action runs without it; one that fails to end it is logged and the run's
    result stands. ``call`` is called exactly once. Costs one :func:`current`
    without a configured provider; a span's start and end with one.
    """
    tracer = current()
    if tracer is None:
        return call()
    done: list[Any] = []
    try:
        with run_span(tracer, job, slot, attempt, lag) as span:
            done.append(call())
            failed = isinstance(done[0], BaseException)
            ended(span, "failed" if failed else "ok", done[0] if failed else None)
    except Exception:  # the tracer's fault, not the run's
        log.warning("rota: a run's span failed; the run is unchanged", exc_info=True)
    return done[0] if done else call()


@contextlib.contextmanager
def run_span(
    tracer: Any, job: object, slot: float, attempt: int, lag: Callable[[], float]
) -> Iterator[Any]:
    """The span of one run by ``tracer`` (:func:`current`), current inside the block;
    yields it. ``lag()`` is asked only for a recorded span. Set ``rota.result`` on it
    with :func:`ended`."""
    with tracer.start_as_current_span(SPAN) as span:
        if span.is_recording():
            try:
                late = float(lag())
            except Exception:  # the clock failed: the run goes on, its span without a lag
                late = math.nan
            span.set_attributes({
                "rota.job": str(job), "rota.slot": float(slot), "rota.attempt": int(attempt),
                "rota.key": f"{job}@{float(slot)!r}", "rota.lag_s": late,
            })  # fmt: skip
        yield span


def ended(span: Any, result: str, error: BaseException | None) -> None:
    """Mark a run's span with its result (and its error as an exception event)."""
    if not span.is_recording():
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
