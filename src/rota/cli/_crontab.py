"""``rota import-crontab FILE``: a crontab turned into the equivalent job file.

A crontab line is a comment (``#``), blank, an environment setting (``NAME=value``,
in force for the lines after it), or a job: five time fields or a shorthand
(``@hourly``, ``@daily``, ...) and a command for the shell. Each job becomes a
``[[jobs]]`` table with the same ``cron`` expression, its ``command`` as a shell
string and the settings in force as its ``env``; ``CRON_TZ``/``TZ`` become its
``tz``. What has no equivalent (``@reboot``, a ``%`` in a command, which cron turns
into standard input, ``MAILTO``, ``SHELL``) is kept as a comment saying why, so
nothing is dropped silently. Ids are the commands' own words, as many as tell
them apart. O(lines).
"""

from __future__ import annotations

import json
import pwd
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rota.cron import MACROS

from ._values import JobFileError

_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")

Warn = Callable[[str], object]


def _stderr(message: str) -> None:
    print(f"rota: warning: {message}", file=sys.stderr)


def convert(path: str | Path, *, system: bool = False, warn: Warn = _stderr) -> str:
    """The job file (TOML text) equivalent to the crontab at ``path``.

    ``system``: the crontab is a system one (``/etc/crontab``, ``/etc/cron.d/*``),
    whose lines name a user before the command; each job notes the user it ran
    as. Without it, a line that looks like one (its sixth field a user of this
    host, and more after it) is converted as written and ``warn`` says so. A
    comment right above a job stays right above it; blank lines are kept.

    Raises :class:`JobFileError` for a file that cannot be read or a line that is
    neither a comment, a setting nor a job (naming the line).
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read it: {exc.strerror}") from None
    out: list[str | _Job] = [f"# Converted from {path} by rota import-crontab.", ""]
    env: dict[str, str] = {}
    tz: str | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            if out[-1] != "":
                out.append("")
            continue
        if line.startswith("#"):
            out.append(line)
            continue
        setting = _ENV.match(line)
        if setting and not line.startswith("@"):
            name, value = setting.group(1), _unquoted(setting.group(2))
            if name in ("CRON_TZ", "TZ"):
                tz = value
            elif name == "MAILTO":
                out.append(f"# MAILTO={value}: rota mails nothing; use on_failure or ping")
            elif name == "SHELL":
                out.append(f"# SHELL={value}: string commands run with /bin/sh; for another "
                           f'shell, command = ["{value}", "-c", "..."]')  # fmt: skip
            else:
                env[name] = value
            continue
        if line.startswith("@reboot"):
            out.append(f"# line {number}: @reboot has no equivalent (start it from the "
                       f"service manager): {line}")  # fmt: skip
            continue
        macro = line.startswith("@")
        fields = line.split(None, (1 if macro else 5) + system)
        if len(fields) < (2 if macro else 6) + system or (
            macro and fields[0].lower() not in MACROS
        ):
            raise JobFileError(f"{path}: line {number}: not a crontab line: {raw!r}")
        cron = fields[0].lower() if macro else " ".join(fields[:5])
        user, command = (fields[-2], fields[-1]) if system else (None, fields[-1])
        if not system and _looks_like_a_user(command):
            warn(f"{path}: line {number}: {command.split()[0]!r} looks like the user field "
                 "of a system crontab; if it is, convert it with --system")  # fmt: skip
        if "%" in command.replace("\\%", ""):
            out.append(f"# line {number}: a % in a command is standard input to cron; "
                       f"rewrite it: {line}")  # fmt: skip
            continue
        out.append(_Job(number, cron, command.replace("\\%", "%"), tz, dict(env), user))
    ids = _ids([job.command for job in out if isinstance(job, _Job)])
    text: list[str] = []
    for item in out:
        text += [item] if isinstance(item, str) else item.lines(ids.pop(0))
    return "\n".join(text).rstrip() + "\n"


class _Job(NamedTuple):
    """One crontab line's job, before its id is chosen (it depends on the others)."""

    line: int
    cron: str
    command: str
    tz: str | None
    env: dict[str, str]
    user: str | None

    def lines(self, job_id: str) -> list[str]:
        found = [
            "[[jobs]]", f"id = {json.dumps(job_id)}", f"cron = {json.dumps(self.cron)}",
            f"command = {json.dumps(self.command)}",
        ]  # fmt: skip
        if self.tz:
            found.append(f"tz = {json.dumps(self.tz)}")
        if self.env:
            pairs = ", ".join(f"{name} = {json.dumps(value)}" for name, value in self.env.items())
            found.append(f"env = {{ {pairs} }}")
        if self.user is not None:
            found.append(f"# ran as {self.user} (line {self.line} of a system crontab): "
                         "rota runs it as the node's user")  # fmt: skip
        return [*found, ""]


def _looks_like_a_user(command: str) -> bool:
    """Whether a command's first word is a user of this host with more words after it,
    as in a system crontab's ``root /usr/bin/report``. O(1) lookups."""
    words = command.split()
    if len(words) < 2 or "/" in words[0]:
        return False
    try:
        pwd.getpwnam(words[0])
    except KeyError:
        return False
    return shutil.which(words[0]) is None  # a user that is not also a program


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


SCRIPT = re.compile(r"\.(sh|bash|py|php|pl|rb|js)$")
WORDS = 4
"""Words of a command at most in its id."""


def _words(command: str) -> list[str]:
    """A command's words for its id: its program's name, then its arguments' (each a
    file's name without a script suffix, an option without its dashes), up to the
    first shell operator or redirection."""
    found: list[str] = []
    for token in command.split():
        if token[0] in "<>|&;" or token[:2] in ("2>", "1>") or "=" in token:
            break
        name = SCRIPT.sub("", Path(token.lstrip("-")).name)
        slug = "-".join(re.findall(r"[A-Za-z0-9]+", name)).lower()
        if len(slug) > 1 or (not found and slug):
            found.append(slug)
    return found or ["job"]


def _ids(commands: list[str]) -> list[str]:
    """Readable, unique job ids for ``commands``, in order: each its program's name,
    and as many of its arguments' words as tell it apart from the commands that
    share that name (``php-artisan``, ``php-cleanup``); numbered where even
    :data:`WORDS` words do not. O(n x WORDS)."""
    words = [_words(command) for command in commands]
    ids = [w[0] for w in words]
    for k in range(2, WORDS + 1):
        counts = Counter(ids)
        ids = [("-".join(w[:k]) if counts[i] > 1 else i) for i, w in zip(ids, words, strict=True)]
    used: set[str] = set()
    unique = []
    for base in (i[:60] for i in ids):
        job_id, n = base, 2
        while job_id in used:
            job_id, n = f"{base}-{n}", n + 1
        used.add(job_id)
        unique.append(job_id)
    return unique
