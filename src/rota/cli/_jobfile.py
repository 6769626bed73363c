"""Job files (TOML): parsing and validation, before anything runs or is stored.

The keys are pinned in ``docs/cli.md``. Every error names the file, the job
and the key, and is a :class:`JobFileError` (the command exits with status 2).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, NamedTuple

from rota import Pool
from rota._core import validate as _validate
from rota._core.deps import Upstream, upstreams
from rota._core.policy import Schedule
from rota._core.waits import check_after
from rota.calendars import AnyOf, Calendar
from rota.durable import json_value, resolve_path
from rota.misfire import Misfire
from rota.overlap import MODES, Overlap
from rota.report import local_zone
from rota.retry import JITTERS, Backoff
from rota.schedules import FixedRate, Once

from ._calendar_tables import business_day, calendar_of, calendar_tables, on_calendar
from ._fleet import (
    AlertRule,
    Destination,
    Retention,
    Token,
    access,
    alert_rule,
    destinations,
    pool,
    pools,
    retention,
    tags,
)
from ._http import HTTP, request_spec
from ._values import JobFileError, duration, instant, zone

COMMAND = "rota.cli._command:run_command"
"""The stored action of ``command`` jobs: importable wherever rota is installed."""

JOB_KEYS = frozenset(
    {"id", "cron", "every", "at", "start", "command", "call", "args", "kwargs", "timeout",
     "tz", "max_retries", "retry", "misfire", "env", "inherit_env", "on_failure", "ping",
     "cwd", "overlap", "deadline", "jitter", "end", "max_runs", "enqueue", "log_output",
     "business_day", "calendar", "on_excluded", "after", "tags", "alert", "http", "pool"}
)  # fmt: skip
DEFAULT_KEYS = JOB_KEYS - {"id", "cron", "every", "at", "start", "command", "call", "enqueue",
                           "http", "business_day", "calendar", "on_excluded",
                           "after"}  # fmt: skip
HANDOFF = "rota.handoff:publish"
"""The stored action of ``enqueue`` jobs (see :mod:`rota.handoff`)."""
FLEET_TABLES = ("retention", "alerts", "access", "pools")
"""The top-level tables of :mod:`rota.cli._fleet`."""
RECURRING_KEYS = frozenset({"misfire", "overlap", "end", "max_runs"})
"""Keys a one-off (``at``) job has no use for: left out of the defaults it takes."""
RETRY_KEYS = frozenset({"base", "cap", "jitter"})
MISFIRES = {"catch_up": Misfire.CATCH_UP, "skip": Misfire.SKIP, "coalesce": Misfire.COALESCE}


@dataclass
class Job:
    """One job of a file, validated: what the store is given."""

    id: str
    when: Schedule
    action: str
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    zone: tzinfo
    max_retries: int = 0
    retry: Backoff | None = None
    misfire: Misfire | None = None
    timeout: float | None = None
    on_failure: str | list[str] | None = None
    ping: str | None = None
    overlap: Overlap | None = None
    deadline: float | None = None
    jitter: float | None = None
    end: datetime | None = None
    max_runs: int | None = None
    after: tuple[Upstream, ...] = ()
    tags: tuple[str, ...] = ()
    alert: AlertRule | None = None
    pool: Pool | None = None

    @property
    def zone_name(self) -> str | None:
        """The IANA name of :attr:`zone` (its ``tz``, or ``[defaults] tz``), or ``None``
        when it is this machine's zone, which has no name to store."""
        key = getattr(self.zone, "key", None)
        return key if isinstance(key, str) else None

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``DurableScheduler.ensure``/``Scheduler.schedule``."""
        return {
            "args": self.args,
            "kwargs": self.kwargs,
            "max_retries": self.max_retries,
            "retry": self.retry,
            "misfire": self.misfire,
            "overlap": self.overlap,
            "deadline": self.deadline,
            "jitter": self.jitter,
            "end": self.end,
            "max_runs": self.max_runs,
            "after": self.after or None,
            "pool": self.pool,
        }


class JobFile(NamedTuple):
    """A job file, validated: its jobs and its tables for operating a fleet."""

    jobs: list[Job]
    retention: Retention | None = None
    destinations: dict[str, Destination] = {}  # noqa: RUF012 (never changed)
    access: list[Token] = []  # noqa: RUF012


def load(path: str | Path, *, imports: bool = True) -> list[Job]:
    """The jobs of a job file (:func:`load_file`)."""
    return load_file(path, imports=imports).jobs


def load_file(path: str | Path, *, imports: bool = True) -> JobFile:
    """Parse and validate a job file. :class:`JobFileError` names file, job and key.

    ``call`` modules are looked for in the job file's directory first (it is put at
    the head of ``sys.path``, as ``python -m rota`` run from there would), then on
    the path. With ``imports`` (``run``) each is imported and its function checked
    against the job's arguments; without (``plan``), a module is only found, never
    imported: no code of the user's runs.
    """
    path = Path(path)
    here = str(path.resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(data) - {"defaults", "jobs", "brokers", "calendars", *FLEET_TABLES}
    if unknown:
        raise JobFileError(
            f"{path}: unknown top-level keys {sorted(unknown)}: use [defaults], [brokers], "
            "[calendars.NAME], [retention], [alerts], [access], [pools] and [[jobs]]"
        )
    known = destinations(data.get("alerts"), f"{path}: [alerts]")
    places = pools(data.get("pools"), f"{path}: [pools]")
    brokers = _brokers(data.get("brokers", {}), f"{path}: [brokers]")
    calendars = calendar_tables(data.get("calendars", {}), path)
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise JobFileError(f"{path}: [defaults] must be a table")
    bad = set(defaults) - DEFAULT_KEYS
    if bad:
        raise JobFileError(f"{path}: [defaults]: unknown keys {sorted(bad)}")
    jobs = data.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
        raise JobFileError(f"{path}: jobs must be [[jobs]] tables")
    if not jobs:
        raise JobFileError(
            f"{path}: no [[jobs]]: a job file declares at least one job (to withdraw all "
            "of a file's jobs, stop its nodes and `rota cancel` each)"
        )
    seen: set[str] = set()
    loaded = []
    for index, raw in enumerate(jobs):
        job_id = raw.get("id")
        if not isinstance(job_id, str) or not job_id.strip() or not job_id.isprintable():
            raise JobFileError(
                f"{path}: job #{index + 1}: key 'id': a non-blank string of printable "
                f"characters (no newline, no control character) is required, got {job_id!r}"
            )
        if job_id in seen:
            raise JobFileError(f"{path}: job {job_id!r}: key 'id': used twice in the file")
        seen.add(job_id)
        merged = _merged(defaults, raw)
        job = _job(path, job_id, merged, imports, brokers, calendars)
        where = f"{path}: job {job_id!r}: key"
        job.tags = tags(merged["tags"], f"{where} 'tags'") if "tags" in merged else ()
        if "alert" in merged:
            job.alert = alert_rule(merged["alert"], f"{where} 'alert'", known)
        if "pool" in merged:
            job.pool = pool(merged["pool"], f"{where} 'pool'", places)
        loaded.append(job)
    cycles(loaded, {}, str(path))
    return JobFile(
        loaded, retention(data.get("retention"), f"{path}: [retention]"), known,
        access(data.get("access"), f"{path}: [access]"),
    )  # fmt: skip


def cycles(jobs: list[Job], stored: dict[Hashable, list[Hashable]], where: str) -> None:
    """:class:`JobFileError` naming the file, the job and its ``after`` if the file's
    jobs close a cycle, among themselves or with the ``stored`` tasks' upstreams
    (task -> the tasks it waits for). O(jobs + edges)."""
    edges: dict[Hashable, list[Hashable]] = dict(stored)
    edges.update((job.id, [u.task_id for u in job.after]) for job in jobs)
    for job in jobs:
        try:
            check_after(edges, job.id, job.after)
        except ValueError as exc:
            raise JobFileError(f"{where}: job {job.id!r}: key 'after': {exc}") from None


def _brokers(table: object, where: str) -> set[str]:
    """``[brokers]``: ``NAME = "redis://..."`` or ``NAME = { env = "VARIABLE" }`` (the
    URL read from the environment, so the file need hold no password), each
    registered for :mod:`rota.handoff` in this process (a node resolves a stored
    job's broker by name). The names."""
    from rota import handoff

    if not isinstance(table, dict):
        raise JobFileError(f"{where} must be a table of NAME = URL")
    for name, value in table.items():
        what = f"{where}: {name!r}"
        if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
            url = os.environ.get(value["env"])
            if not url:
                raise JobFileError(f"{what}: ${value['env']} is not set")
        elif isinstance(value, str):
            url = value
        else:
            raise JobFileError(f'{what}: a URL or {{ env = "VARIABLE" }} is required')
        try:
            handoff.register_broker(name, url)
        except ValueError as exc:
            raise JobFileError(f"{what}: {exc}") from None
    return set(table)


def _command(
    raw: dict[str, Any], timeout: float | None, key: Callable[[str], str]
) -> tuple[str, list[Any], dict[str, Any] | None]:
    """A ``command`` job's stored action, arguments and keyword arguments (``env``,
    ``inherit_env`` and ``cwd`` only when given: a job stored before them stays as it
    was). ``cwd`` is kept as written: a relative one is the node's working directory's
    (each node runs the command where it runs, as cron does)."""
    command = raw["command"]
    if not (isinstance(command, str) and command.strip()) and not (
        isinstance(command, list) and command and all(isinstance(a, str) for a in command)
    ):
        raise JobFileError(f"{key('command')}: a non-empty string or list of strings is required")
    missing = _missing_program(command)
    if missing is not None:
        raise JobFileError(
            f"{key('command')}: no program {missing!r} on the PATH; give its path "
            f"(e.g. '/opt/app/bin/{missing}') if it will be installed later"
        )
    kwargs: dict[str, Any] = {}
    if "env" in raw:
        env = raw["env"]
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str)
            for k, v in env.items()
        ):
            raise JobFileError(f'{key("env")}: a table of NAME = "value" strings is required')
        kwargs["env"] = env
    if "inherit_env" in raw:
        inherit = raw["inherit_env"]
        if not isinstance(inherit, bool) and not (
            isinstance(inherit, list) and all(isinstance(n, str) and n for n in inherit)
        ):
            raise JobFileError(
                f"{key('inherit_env')}: true, false, or a list of variable names is required"
            )
        kwargs["inherit"] = inherit
    if "log_output" in raw:
        switch = raw["log_output"]
        if not isinstance(switch, bool) and not (isinstance(switch, int) and switch >= 0):
            raise JobFileError(
                f"{key('log_output')}: true, false, or a number of lines a run (>= 0) is "
                f"required, got {switch!r}"
            )
        kwargs["log_output"] = switch
    if "cwd" in raw:
        cwd = raw["cwd"]
        if not isinstance(cwd, str) or not cwd:
            raise JobFileError(f"{key('cwd')}: a directory (a non-empty string) is required")
        kwargs["cwd"] = cwd
    return COMMAND, [command, timeout], kwargs or None


MIN_PERIOD = 0.1
"""The shortest ``every`` a job file accepts, in seconds (see ``docs/cli.md``)."""

SHELL_WORDS = frozenset(
    [
        "!",
        "{",
        "}",
        "(",
        "[",
        "[[",
        ".",
        ":",
        "alias",
        "bg",
        "break",
        "case",
        "cd",
        "command",
        "continue",
        "eval",
        "exec",
        "exit",
        "export",
        "false",
        "fc",
        "fg",
        "for",
        "function",
        "getopts",
        "hash",
        "if",
        "jobs",
        "kill",
        "local",
        "read",
        "readonly",
        "return",
        "set",
        "shift",
        "source",
        "test",
        "times",
        "trap",
        "true",
        "type",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "until",
        "wait",
        "while",
    ]
)
"""The shell's keywords and builtins: a command string may start with one, which no
program on the PATH need be."""


def _missing_program(command: str | list[str]) -> str | None:
    """The program a ``command`` starts, if it is a bare name found nowhere on the PATH
    (a typo, a package not installed). Not checked: a path (``./run.sh``,
    ``/opt/x``: it may be installed after the file is written), a shell string that
    starts with a builtin, an assignment, an expansion or anything that is not a
    plain word. O(PATH) lookups."""
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError:  # unbalanced quotes: the shell will say so at the run
            return None
        if not words:
            return None
        program = words[0]
        if program in SHELL_WORDS or not re.fullmatch(r"[\w.+-]+", program):
            return None
    else:
        program = command[0]
    if "/" in program or shutil.which(program) is not None:
        return None
    return program


def _enqueue(
    raw: dict[str, Any], key: Callable[[str], str], brokers: frozenset[str] | set[str]
) -> tuple[str, None, dict[str, Any]]:
    """An ``enqueue`` job: ``{ TARGET = "task.name", queue = "...", broker = "NAME" }``,
    TARGET one of celery, rq, dramatiq, arq; the job's ``args``/``kwargs`` go to the
    task (and with ``window = true`` the run's window, as the keyword arguments
    ``window_start``/``window_end``). Its stored action is :data:`HANDOFF`, called
    with keyword arguments only. ``broker`` defaults to the one ``[brokers]`` entry
    (or ``default``), and must be declared there or in ``$ROTA_BROKER_<NAME>``."""
    from rota import handoff

    value, what = raw["enqueue"], key("enqueue")
    targets = [t for t in handoff.TARGETS if isinstance(value, dict) and t in value]
    if not isinstance(value, dict) or len(targets) != 1 or set(value) - {
        *targets, "queue", "broker", "window",
    }:  # fmt: skip
        raise JobFileError(
            f'{what}: a table like {{ celery = "proj.tasks.report", queue = "reports", '
            f'broker = "main" }} is required: one of {", ".join(handoff.TARGETS)}, and '
            "optionally queue, broker and window"
        )
    broker = value.get("broker", next(iter(brokers)) if len(brokers) == 1 else "default")
    try:
        message = handoff.message(
            targets[0], value[targets[0]], broker=broker, queue=value.get("queue"),
            args=_json(raw.get("args", []), key("args"), list) or [],
            kwargs=_json(raw.get("kwargs"), key("kwargs"), dict),
            window=value.get("window", False),
        )  # fmt: skip
        handoff.broker_url(broker)
    except (TypeError, ValueError, handoff.HandoffError) as exc:
        raise JobFileError(f"{what}: {exc}") from None
    return HANDOFF, None, message


def _merged(defaults: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """A job's keys over the defaults; a default that does not apply to it is left out
    (``misfire`` for a one-off, ``timeout`` for a ``call``, ``args`` for a ``command``)."""
    merged = {**defaults, **raw}
    unfit: set[str] = set()
    if "at" in raw:
        unfit |= RECURRING_KEYS
    if "call" in raw or "enqueue" in raw or "http" in raw:
        unfit |= {"timeout", "env", "inherit_env", "cwd"}
    if "http" in raw:
        unfit |= {"args", "kwargs"}
    if "command" in raw:
        unfit |= {"args", "kwargs"}
    for name in unfit - set(raw):
        merged.pop(name, None)
    return merged


def _job(
    path: Path,
    job_id: str,
    raw: dict[str, Any],
    imports: bool = True,
    brokers: frozenset[str] | set[str] = frozenset(),
    calendars: dict[str, Calendar] | None = None,
) -> Job:
    """One job's keys (over the defaults), validated: its :class:`Job`."""
    where = f"{path}: job {job_id!r}"

    def key(name: str) -> str:
        return f"{where}: key {name!r}"

    unknown = set(raw) - JOB_KEYS
    if unknown:
        raise JobFileError(f"{where}: unknown keys {sorted(unknown)}")
    tz = zone(raw["tz"], key("tz")) if "tz" in raw else local_zone()
    kind, when, tz = _schedule(raw, calendars or {}, tz, where)
    timeout = duration(raw["timeout"], key("timeout")) if "timeout" in raw else None
    args: list[Any] | None
    does = _one_of(raw, ("command", "call", "enqueue", "http"), where)
    if does == "http":
        if set(raw) & {"args", "kwargs", "env", "inherit_env", "cwd", "timeout"}:
            raise JobFileError(
                f"{where}: 'args'/'kwargs'/'env'/'inherit_env'/'cwd'/'timeout' do not go with "
                "'http' (its timeout is in its table)"
            )
        action, args, kwargs = HTTP, [request_spec(raw["http"], key)], None
    elif does == "command":
        if "args" in raw or "kwargs" in raw:
            raise JobFileError(f"{where}: 'args'/'kwargs' go with 'call', not 'command'")
        action, args, kwargs = _command(raw, timeout, key)
    elif does == "enqueue":
        if "env" in raw or "inherit_env" in raw or "cwd" in raw or timeout is not None:
            raise JobFileError(
                f"{where}: 'env'/'inherit_env'/'cwd'/'timeout' go with 'command', not 'enqueue'"
            )
        action, args, kwargs = _enqueue(raw, key, brokers)
    else:
        if "env" in raw or "inherit_env" in raw or "cwd" in raw:
            raise JobFileError(f"{where}: 'env'/'inherit_env'/'cwd' go with 'command', not 'call'")
        action, args, kwargs = _call(raw, timeout, key, imports)
    max_retries = raw.get("max_retries", 0)
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise JobFileError(f"{key('max_retries')}: {max_retries!r} is not an int >= 0")
    retry = _retry(raw["retry"], key("retry")) if "retry" in raw else None
    misfire = _misfire(raw["misfire"], key("misfire")) if "misfire" in raw else None
    for name in sorted(RECURRING_KEYS & set(raw)):
        if kind == "at":
            raise JobFileError(f"{key(name)}: a one-off ('at') job has no slots to apply it to")
    job = Job(job_id, when, action, args, kwargs, tz, max_retries, retry, misfire, timeout,
              _on_failure(raw, key), _ping(raw, key))  # fmt: skip
    if "overlap" in raw:
        job.overlap = _overlap(raw["overlap"], key("overlap"), does)
    if "deadline" in raw:
        job.deadline = duration(raw["deadline"], key("deadline"))
    if "jitter" in raw:
        job.jitter = duration(raw["jitter"], key("jitter"))
    if "end" in raw:
        job.end = instant(raw["end"], key("end"), tz)
    if "max_runs" in raw:
        max_runs = raw["max_runs"]
        if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
            raise JobFileError(f"{key('max_runs')}: {max_runs!r} is not an int >= 1")
        job.max_runs = max_runs
    if "after" in raw:
        job.after = _after(raw["after"], key("after"))
    return job


def _after(value: object, what: str) -> tuple[Upstream, ...]:
    """``after``: a job id, or a list of ids and ``{ job = "id", within = "slot" |
    "window" | DURATION }`` tables (all must hold)."""
    items = value if isinstance(value, list) else [value]
    found: list[Upstream] = []
    for item in items:
        if isinstance(item, str) and item:
            found.append(Upstream(item))
        elif isinstance(item, dict) and set(item) <= {"job", "within"} and "job" in item:
            job, within = item["job"], item.get("within", "slot")
            if not isinstance(job, str) or not job:
                raise JobFileError(f"{what}: job = {job!r} is not a job id")
            if within not in ("slot", "window"):
                within = timedelta(seconds=duration(within, f"{what}: within"))
            found.append(Upstream(job, within))
        else:
            raise JobFileError(
                f'{what}: {item!r} is not a job id or {{ job = "id", within = "slot" | '
                '"window" | DURATION }'
            )
    try:
        return upstreams(found)
    except ValueError as exc:
        raise JobFileError(f"{what}: {exc}") from None


def _schedule(
    raw: dict[str, Any], calendars: dict[str, Calendar], tz: tzinfo, where: str
) -> tuple[str, Schedule, tzinfo]:
    """A job's kind (``cron``, ``every``, ``at``, ``business_day``), its schedule, and
    the zone its times are shown in (a business-day job's: its calendar's, unless it
    gives ``tz``)."""

    def key(name: str) -> str:
        return f"{where}: key {name!r}"

    calendar = calendar_of(raw, calendars, key)
    if "business_day" in raw:  # its 'at' is a time of day, not a one-off's instant
        kind = _one_of(raw, ("cron", "every", "business_day"), where)
    else:
        kind = _one_of(raw, ("cron", "every", "at"), where)
    if "start" in raw and kind != "every":
        raise JobFileError(f"{key('start')}: only an 'every' job has a start")
    if kind == "business_day":
        if calendar is None:
            raise JobFileError(f"{key('business_day')}: needs a 'calendar' (its business days)")
        if "tz" not in raw:  # its times are the calendar's, and shown in its zone
            tz = _validate.zone("tz", calendar.tz)
        when = business_day(raw, calendar, key)
        if "on_excluded" not in raw:  # its slots are business days already
            return kind, when, tz
    else:
        when = _when(raw, kind, tz, key)
    return kind, on_calendar(raw, kind, when, calendar, key), tz


def _overlap(value: Any, what: str, does: str) -> Overlap:
    """``overlap``: the name of an overlap policy, or ``{ allow = N }``; ``"replace"``
    only for a ``command`` job (``does``), whose process group is what can be stopped."""
    if isinstance(value, str) and value == "replace" and does != "command":
        raise JobFileError(
            f"{what}: 'replace' stops the run in flight, and only a 'command' job's run "
            f"can be stopped (its process group), not a {does!r} job's; use "
            '"skip", "buffer" or { allow = N }'
        )
    if isinstance(value, dict) and set(value) == {"allow"}:
        limit = value["allow"]
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise JobFileError(f"{what}: allow = {limit!r} is not an int >= 1")
        return Overlap.allow(limit)
    if isinstance(value, str) and value in MODES:
        return Overlap.named(value)
    raise JobFileError(f"{what}: {value!r} is not one of buffer, skip, replace, {{ allow = N }}")


def _on_failure(raw: dict[str, Any], key: Callable[[str], str]) -> str | list[str] | None:
    """``on_failure``: a command (argv list, or a string for the shell), or absent."""
    if "on_failure" not in raw:
        return None
    command = raw["on_failure"]
    if (isinstance(command, str) and command.strip()) or (
        isinstance(command, list) and command and all(isinstance(a, str) for a in command)
    ):
        return command
    raise JobFileError(f"{key('on_failure')}: a non-empty string or list of strings is required")


def _ping(raw: dict[str, Any], key: Callable[[str], str]) -> str | None:
    """``ping``: an http(s) URL (healthchecks.io style: ``/start``, ``/fail`` appended)."""
    if "ping" not in raw:
        return None
    url = raw["ping"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise JobFileError(f"{key('ping')}: an http:// or https:// URL is required, got {url!r}")
    return url


def _one_of(raw: dict[str, Any], names: tuple[str, ...], where: str) -> str:
    """The one key of ``names`` the job gives; :class:`JobFileError` for none or several."""
    given = [name for name in names if name in raw]
    if len(given) != 1:
        choices = ", ".join(f"'{name}'" for name in names)
        raise JobFileError(f"{where}: give exactly one of {choices} (got {given or 'none'})")
    return given[0]


def _call(
    raw: dict[str, Any], timeout: float | None, key: Callable[[str], str], imports: bool
) -> tuple[str, list[Any] | None, dict[str, Any] | None]:
    """A ``call`` job's stored action (its import path, checked to import and to take
    the arguments given, or with ``imports`` false only found), arguments and keyword
    arguments. The function is called with exactly the ``args`` and ``kwargs`` the job
    gives (none: no argument), and ``run=`` (a ``rota.RunContext``) if it declares
    a keyword-only parameter ``run``."""
    action = raw["call"]
    if not isinstance(action, str) or ":" not in action:
        raise JobFileError(f"{key('call')}: {action!r} is not 'package.module:function'")
    args = _json(raw.get("args", []), key("args"), list)
    kwargs = _json(raw.get("kwargs"), key("kwargs"), dict)
    if timeout is not None:
        raise JobFileError(f"{key('timeout')}: only a 'command' job can be killed on timeout")
    module = action.partition(":")[0]
    if (
        not imports
        and module not in sys.modules
        and (module.partition(".")[0] not in sys.stdlib_module_names)
    ):  # a module of the user's: found, not run (the standard library's runs nothing new)
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:  # a parent package missing, or broken
            raise JobFileError(f"{key('call')}: cannot import {action!r}: {exc!r}") from None
        if found is None:
            raise JobFileError(f"{key('call')}: cannot import {action!r}: no module {module!r}")
        return action, args, kwargs
    try:
        function = resolve_path(action)
    except Exception as exc:
        raise JobFileError(f"{key('call')}: cannot import {action!r}: {exc!r}") from None
    if not callable(function):
        raise JobFileError(f"{key('call')}: {action!r} is not callable")
    _check_call(function, args, kwargs, key("call"))
    return action, args, kwargs


def _when(raw: dict[str, Any], kind: str, tz: tzinfo, key: Any) -> Schedule:
    if kind == "every":
        period = duration(raw["every"], key("every"))
        if period < MIN_PERIOD:
            raise JobFileError(
                f"{key('every')}: {raw['every']!r} is below the floor of 100ms: each run is "
                "a claim and a commit in the store (and a process, for a command), so a "
                "shorter period is a busy loop, not a schedule"
            )
        if "start" in raw:
            return FixedRate(period, start=instant(raw["start"], key("start"), tz))
        return FixedRate(period, delay=period)
    if kind == "at":
        return Once(at=instant(raw["at"], key("at"), tz))
    given = raw["cron"]
    expressions = given if isinstance(given, list) else [given]
    if not expressions or not all(isinstance(e, str) for e in expressions):
        raise JobFileError(
            f"{key('cron')}: {given!r} is not a cron expression string or a list of them"
        )
    try:
        from rota.cron import Cron
    except ImportError:
        raise JobFileError(
            f"{key('cron')}: cron needs the cron extra: pip install 'rota[cron]'"
        ) from None
    try:
        crons = [Cron(expression, tz=tz) for expression in expressions]
    except ValueError as exc:
        raise JobFileError(f"{key('cron')}: {exc}") from None
    return crons[0] if isinstance(given, str) else AnyOf(*crons)


def _json(value: Any, what: str, kind: type) -> Any:
    if value is None:
        return None
    if not isinstance(value, kind):
        raise JobFileError(f"{what}: must be a {'list' if kind is list else 'table'}")
    try:
        return json_value(what, value)
    except TypeError as exc:
        raise JobFileError(str(exc)) from None


def _check_call(function: Any, args: Any, kwargs: Any, what: str) -> None:
    from rota._core.calls import prepare

    try:
        prepare(function, args, kwargs)
    except TypeError as exc:
        raise JobFileError(f"{what}: {exc}") from None


def _retry(value: Any, what: str) -> Backoff:
    if not isinstance(value, dict):
        raise JobFileError(f'{what}: must be a table like {{ base = "1s", cap = "1m" }}')
    unknown = set(value) - RETRY_KEYS
    if unknown:
        raise JobFileError(f"{what}: unknown keys {sorted(unknown)}")
    jitter = value.get("jitter", "none")
    if jitter not in ("none", *JITTERS):
        raise JobFileError(f"{what}: jitter {jitter!r} is not one of none, {', '.join(JITTERS)}")
    base = duration(value.get("base", 1), f"{what}.base")
    cap = duration(value["cap"], f"{what}.cap") if "cap" in value else None
    return Backoff(base, cap=cap, jitter=None if jitter == "none" else jitter)


def _misfire(value: Any, what: str) -> Misfire:
    if isinstance(value, str) and value in MISFIRES:
        return MISFIRES[value]
    if isinstance(value, dict) and set(value) == {"bounded"}:
        k = value["bounded"]
        if isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            return Misfire.bounded(k)
    raise JobFileError(f"{what}: {value!r} is not catch_up, skip, coalesce or {{ bounded = N }}")
