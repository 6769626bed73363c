"""``rota import-crontab FILE``: a crontab turned into the equivalent job file.

A crontab line is a comment (``#``), blank, an environment setting (``NAME=value``,
in force for the lines after it), or a job: five time fields or a shorthand
(``@hourly``, ``@daily``, ...) and a command for the shell. Each job becomes a
``[[jobs]]`` table with the same ``cron`` expression, its ``command`` as a shell
string and the settings in force as its ``env``; ``CRON_TZ``/``TZ`` become its
``tz``. What has no equivalent (``@reboot``, a ``%`` in a command, which cron turns
into standard input, ``MAILTO``, ``SHELL``) is kept as a comment saying why, so
nothing is dropped silently. O(lines).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rota.cli._jobfile import JobFileError
from rota.cron import MACROS

_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def convert(path: str | Path) -> str:
    """The job file (TOML text) equivalent to the crontab at ``path``.

    Raises :class:`JobFileError` for a file that cannot be read or a line that is
    neither a comment, a setting nor a job (naming the line).
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read it: {exc.strerror}") from None
    out = [f"# Converted from {path} by rota import-crontab.", ""]
    env: dict[str, str] = {}
    tz: str | None = None
    used: set[str] = set()
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            if line:
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
        fields = line.split(None, 1 if line.startswith("@") else 5)
        if line.startswith("@reboot"):
            out.append(f"# line {number}: @reboot has no equivalent (start it from the "
                       f"service manager): {line}")  # fmt: skip
            continue
        if line.startswith("@"):
            if fields[0].lower() not in MACROS or len(fields) < 2:
                raise JobFileError(f"{path}: line {number}: not a crontab line: {raw!r}")
            cron, command = fields[0].lower(), fields[1]
        else:
            if len(fields) < 6:
                raise JobFileError(f"{path}: line {number}: not a crontab line: {raw!r}")
            cron, command = " ".join(fields[:5]), fields[5]
        if "%" in command.replace("\\%", ""):
            out.append(f"# line {number}: a % in a command is standard input to cron; "
                       f"rewrite it: {line}")  # fmt: skip
            continue
        job_id = _id(command, used)
        out += ["[[jobs]]", f"id = {json.dumps(job_id)}", f"cron = {json.dumps(cron)}",
                f"command = {json.dumps(command.replace(chr(92) + '%', '%'))}"]  # fmt: skip
        if tz:
            out.append(f"tz = {json.dumps(tz)}")
        if env:
            pairs = ", ".join(f"{name} = {json.dumps(value)}" for name, value in env.items())
            out.append(f"env = {{ {pairs} }}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _id(command: str, used: set[str]) -> str:
    """A readable, unique job id from a command: its program's name, numbered if
    taken already."""
    words = re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", Path(command.split(maxsplit=1)[0]).name)
    base = (words[0] if words else "job")[:40]
    job_id, n = base, 2
    while job_id in used:
        job_id, n = f"{base}-{n}", n + 1
    used.add(job_id)
    return job_id
