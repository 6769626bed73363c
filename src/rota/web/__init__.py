"""The web dashboard, the HTTP API and Prometheus metrics (extra ``rota[web]``).

Mount it in the app you already run, for an in-memory
:class:`~rota.Scheduler` or a :class:`~rota.DurableScheduler`::

    app.mount("/rota", rota.web.asgi_app(scheduler))             # FastAPI, Starlette
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app,
                                        {"/rota": rota.web.wsgi_app(scheduler)})  # Flask

or serve it on its own: ``rota web --store URL`` (a process that runs no
jobs) or ``rota run JOBFILE --web HOST:PORT`` (a running node, whose
``/metrics`` adds its own runs). ``docs/web.md`` has the routes, the JSON,
the metrics, the access rules and the recipes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
import threading
from typing import Any

from rota import Scheduler
from rota.metrics import Collector
from rota.observe import source

from ._access import Access
from ._app import Dashboard

__all__ = [
    "Access",
    "Dashboard",
    "Server",
    "asgi_app",
    "is_loopback",
    "listen_address",
    "wsgi_app",
]


def asgi_app(
    scheduler: Scheduler,
    *,
    token: str | None = None,
    runs: bool | Collector = True,
    tokens: list[dict[str, str]] | None = None,
) -> Any:
    """The dashboard, API and ``/metrics`` of ``scheduler`` as an ASGI app (Starlette).

    ``token``: the one that grants actions (``POST``s), see :class:`Access`;
    ``None`` allows them to requests without a browser's marks and to the
    page itself (serve it on loopback only, or behind your own auth).
    ``tokens``: named tokens with a scope, ``[{"name", "scope", "sha256"}]``
    (``docs/operations.md``), beside those a node published in the store.
    ``runs``: count this process's runs in ``/metrics`` (a listener on the
    scheduler), or a :class:`~rota.metrics.Collector` already counting.
    An in-memory scheduler's history holds the outcomes reported from now
    on (the latest 100 of each task). Raises ``TypeError`` for a
    ``scheduler`` that is not a Scheduler, ``ValueError`` for an empty token.
    """
    read = source(scheduler)
    node = runs if isinstance(runs, Collector) else Collector(read, runs=bool(runs))
    return Dashboard(read, token=token, node=node, tokens=tokens).app()


def wsgi_app(
    scheduler: Scheduler, *, token: str | None = None, runs: bool | Collector = True
) -> Any:
    """:func:`asgi_app` as a WSGI app (through ``a2wsgi``), for Flask, Django's WSGI
    and gunicorn's sync workers. The page's live updates are polled, so they
    need no streaming. Raises as :func:`asgi_app` does."""
    from a2wsgi import ASGIMiddleware

    return ASGIMiddleware(asgi_app(scheduler, token=token, runs=runs))


def listen_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8787`` for IPv6) as ``(host, port)``; port ``0``: a free
    one. Raises ``ValueError`` naming the value for anything else."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:8787), got {value!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """An app served by uvicorn on a socket bound at construction (so the real port
    of ``port=0`` is known, and :attr:`url` says it, before serving starts).

    :meth:`run` serves on this thread until SIGINT/SIGTERM (uvicorn's
    handlers); :meth:`start` serves on a daemon thread until :meth:`stop`.
    Raises ``OSError`` if the address cannot be bound.
    """

    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response's headers and body, written
        # apart, would otherwise wait out the client's delayed ACK (40 ms) on a
        # keep-alive connection.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(128)
        except OSError:
            self._socket.close()
            raise
        real = self._socket.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{real}/"
        """Where it serves, with the real port."""
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then return (a clean stop: the caller exits 0;
        uvicorn's own handlers would raise the signal again once stopped). Blocks."""

        def stop(signum: int, frame: object) -> None:
            self._server.should_exit = True

        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        try:
            self._server.run(sockets=[self._socket])
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._socket.close()

    def start(self) -> None:
        """Serve on a daemon thread (no signal handlers there: the caller's stay)."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]},
            name="rota-web", daemon=True,
        )  # fmt: skip
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (open requests get ``timeout`` s). Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()
