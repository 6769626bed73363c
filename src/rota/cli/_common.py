"""What the ``rota`` subcommands and ``run``'s loop share: the error that ends the
command with an exit status, and a dashboard server bound to its address. (Its own
module, so that neither imports the other.)"""

from __future__ import annotations

import sys
from typing import Any


class CliError(Exception):
    """Stop the command with an exit status and a message for stderr."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bind(app: Any, host: str, port: int, what: str) -> Any:
    """A :class:`rota.web.Server` bound to ``host:port`` (exit 2 if it cannot be);
    its URL printed on stderr, once it listens."""
    from rota.web import Server

    try:
        server = Server(app, host, port)
    except OSError as exc:
        raise CliError(2, f"{what} {host}:{port}: {exc.strerror or exc}") from None
    print(f"rota: dashboard at {server.url}", file=sys.stderr, flush=True)
    return server


def file_tokens() -> list[dict[str, str]]:
    """The named tokens of ``$ROTA_TOKENS_FILE`` (none if unset), as the dashboard takes
    them; a file that cannot be read or is invalid stops the command (exit 2)."""
    import os

    from ._fleet import tokens_file

    path = os.environ.get("ROTA_TOKENS_FILE")
    return [] if not path else [token.to_json() for token in tokens_file(path)]
