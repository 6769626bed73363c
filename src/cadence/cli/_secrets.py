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


class ScrubFilter(logging.Filter):
    """Scrubs each record before any handler formats it: its message (arguments
    merged in) and its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info))).rstrip()
            record.exc_info = None
        return True
