"""No secret in any output: the password of a store URL is shown as ``***``.

The command registers the password of its ``--store`` URL (:func:`hide`) before it
does anything with it; :func:`scrub` then removes it, and any password in a URL or a
connection string, from a message; :class:`ScrubFilter` does it to every log record
(message and traceback) whatever handler formats it.
"""

from __future__ import annotations

import logging
import traceback
from urllib.parse import unquote, urlsplit

from cadence.cli._command import CommandError
from cadence.durable import GivenBack, RunCancelled
from cadence.store import redacted

_hidden: set[str] = set()


def hide(url: str) -> None:
    """Register the password of ``url`` (as written, and percent-decoded). O(len(url))."""
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


EXPECTED: tuple[type[BaseException], ...] = (CommandError, RunCancelled, GivenBack)
"""How a job's run ends without a fault of cadence's: logged in one line, without a
traceback (which would show only cadence's own frames)."""


class ScrubFilter(logging.Filter):
    """Scrubs each record before any handler formats it: its message (arguments
    merged in), its ``error`` field and its traceback; drops the traceback of a
    job's own failure (:data:`EXPECTED`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        if record.exc_info and isinstance(record.exc_info[1], EXPECTED):
            record.exc_info = None  # a job's failure, said in one line: no traceback of ours
        if isinstance(getattr(record, "error", None), str):
            record.error = scrub(record.error)  # type: ignore[attr-defined]
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info))).rstrip()
            record.exc_info = None
        return True
