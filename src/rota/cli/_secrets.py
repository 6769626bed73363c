"""No secret in any output: the password of a store URL is shown as ``***``.

The command registers the password of its ``--store`` URL (:func:`hide`) before it
does anything with it; :func:`scrub` then removes it, and any password in a URL or a
connection string, from a message; :class:`ScrubFormatter` does it to every log line
(message and traceback) the command's handlers write.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from rota.durable import GivenBack, RunCancelled
from rota.handoff import HandoffError
from rota.store import redacted

from ._command import CommandError

_hidden: set[str] = set()


def hide(url: str, *, whole: bool = False) -> None:
    """Register the password of ``url`` (as written, and percent-decoded), or with
    ``whole`` the text itself (a ``--token``). O(len(url))."""
    if whole:
        _hidden.add(url)
        return
    try:
        password = urlsplit(url).password
    except ValueError:  # not a URL at all: nothing to take apart
        return
    if password:
        _hidden.update({password, unquote(password)})


def scrub(text: str) -> str:
    """``text`` with every registered password, and every password in a URL or a
    connection string, as ``***``. O(len(text) x registered)."""
    for secret in _hidden:
        text = text.replace(secret, "***")
    return redacted(text)


EXPECTED: tuple[type[BaseException], ...] = (CommandError, RunCancelled, GivenBack, HandoffError)
"""How a job's run ends without a fault of rota's: logged in one line, without a
traceback (which would show only rota's own frames)."""


class ScrubFormatter(logging.Formatter):
    """A formatter whose output is scrubbed (message, arguments and traceback), and
    which leaves out the traceback of a job's own failure (:data:`EXPECTED`). It
    changes what it writes, never the record, which other handlers share."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))

    def formatException(self, ei: Any) -> str:  # noqa: N802 - the stdlib's name
        if isinstance(ei[1], EXPECTED):
            return ""  # (falsy: not cached on the record for other handlers)
        return scrub(super().formatException(ei))
