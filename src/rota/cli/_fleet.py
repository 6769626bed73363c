"""A job file's tables for operating a fleet: ``[retention]``, ``[alerts]``, ``[access]``,
and the per-job keys ``tags`` and ``alert`` (``docs/operations.md``).

Each is validated here, before anything runs or is stored, and every error is a
:class:`JobFileError` naming the file, the table or job, and the key. Secrets (a
webhook URL, a token) are read from the environment when given as ``{ env =
"VARIABLE" }``; a token is kept only as its SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota import Pool

from ._values import JobFileError, duration

SCOPES = ("read", "operate", "admin")
"""Token scopes, each granting what the ones before it grant."""
EVENTS = ("failing", "recovered", "running_long", "paused", "overdue")
"""What an alert says happened."""


@dataclass(frozen=True)
class Retention:
    """``[retention]``: outcomes older than ``keep`` seconds and beyond the newest
    ``keep_runs`` of each job are deleted (``None``: no such limit); the audit log and
    the alerts are kept by ``keep`` only."""

    keep: float | None = None
    keep_runs: int | None = None

    def to_json(self) -> dict[str, Any]:
        """As a store setting keeps it."""
        return {"keep": self.keep, "keep_runs": self.keep_runs}

    @classmethod
    def from_json(cls, value: Any) -> Retention | None:
        """From a store setting; ``None`` for none (or one this version cannot read)."""
        if not isinstance(value, dict):
            return None
        keep, runs = value.get("keep"), value.get("keep_runs")
        return cls(
            float(keep) if isinstance(keep, int | float) else None,
            runs if isinstance(runs, int) else None,
        )

    def __str__(self) -> str:
        parts = []
        if self.keep is not None:
            parts.append(f"outcomes kept {shown_duration(self.keep)}")
        if self.keep_runs is not None:
            parts.append(f"at most {self.keep_runs} runs per job")
        return ", ".join(parts)


def shown_duration(seconds: float) -> str:
    """``2592000`` as ``30d``, ``5400`` as ``90m``: the largest unit that divides it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Destination:
    """A named place alerts go: a ``webhook`` URL (POSTed a JSON body, Slack's with
    ``format = "slack"``) or a ``command`` (run with ``ROTA_ALERT_*`` variables)."""

    name: str
    webhook: str | None = None
    format: str = "json"
    command: str | list[str] | None = None

    def __repr__(self) -> str:  # the URL may hold a secret (Slack's does)
        kind = "webhook" if self.webhook is not None else "command"
        return f"Destination({self.name!r}, {kind})"


@dataclass(frozen=True)
class AlertRule:
    """A job's ``alert``: where to (``to``), after how many failures in a row
    (``after``), whether a recovery is told (``recovered``), after how long a run is
    told to run long (``running_longer``, seconds), after how many failures in a row
    the job is paused (``pause_after``)."""

    to: tuple[str, ...]
    after: int = 1
    recovered: bool = False
    running_longer: float | None = None
    pause_after: int | None = None


ALERT_KEYS = frozenset({"to", "after", "recovered", "running_longer", "pause_after"})


def retention(table: object, where: str) -> Retention | None:
    """``[retention]`` (``keep = "30d"``, ``keep_runs = 1000``); ``None`` if absent."""
    if table is None:
        return None
    if not isinstance(table, dict) or set(table) - {"keep", "keep_runs"}:
        raise JobFileError(f'{where}: a table of keep = "30d" and/or keep_runs = 1000 is required')
    keep = duration(table["keep"], f"{where}: key 'keep'") if "keep" in table else None
    runs = table.get("keep_runs")
    if runs is not None and (not isinstance(runs, int) or isinstance(runs, bool) or runs < 1):
        raise JobFileError(f"{where}: key 'keep_runs': {runs!r} is not an int >= 1")
    return Retention(keep, runs)


def pools(table: object, where: str) -> dict[str, Pool]:
    """``[pools]`` (``warehouse = 2``: a name and its size); empty if absent."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise JobFileError(f"{where}: a table of names and sizes like warehouse = 2 is required")
    found = {}
    for name, size in table.items():
        try:
            found[name] = Pool(name, size)
        except (TypeError, ValueError) as exc:
            raise JobFileError(f"{where}: key {name!r}: {exc}") from None
    return found


def pool(value: object, what: str, known: dict[str, Pool]) -> Pool:
    """A job's ``pool``: the name of one of ``[pools]``."""
    if not isinstance(value, str) or value not in known:
        declared = ", ".join(sorted(known)) or "none"
        raise JobFileError(f"{what}: {value!r} is not a pool of [pools] (declared: {declared})")
    return known[value]


def secret(value: object, what: str) -> str:
    """A string given as is or as ``{ env = "VARIABLE" }`` (read now)."""
    if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
        found = os.environ.get(value["env"])
        if not found:
            raise JobFileError(f"{what}: ${value['env']} is not set")
        return found
    if isinstance(value, str) and value:
        return value
    raise JobFileError(f'{what}: a non-empty string or {{ env = "VARIABLE" }} is required')


def destinations(table: object, where: str) -> dict[str, Destination]:
    """``[alerts]``: ``NAME = { webhook = URL | { env = ... }, format = "json" | "slack" }``
    or ``NAME = { command = [...] }``."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise JobFileError(f"{where} must be a table of NAME = {{ webhook = ... }}")
    found = {}
    for name, value in table.items():
        what = f"{where}: {name!r}"
        if not isinstance(value, dict) or len({"webhook", "command"} & set(value)) != 1:
            raise JobFileError(f'{what}: {{ webhook = "http://..." }} or {{ command = [...] }}')
        if set(value) - {"webhook", "command", "format"}:
            raise JobFileError(
                f"{what}: unknown keys {sorted(set(value) - {'webhook', 'command', 'format'})}"
            )
        if "command" in value:
            command = value["command"]
            if not (isinstance(command, str) and command.strip()) and not (
                isinstance(command, list) and command and all(isinstance(a, str) for a in command)
            ):
                raise JobFileError(
                    f"{what}: key 'command': a string or list of strings is required"
                )
            found[name] = Destination(name, command=command)
            continue
        url = secret(value["webhook"], f"{what}: key 'webhook'")
        if not url.startswith(("http://", "https://")):
            raise JobFileError(f"{what}: key 'webhook': an http:// or https:// URL is required")
        form = value.get("format", "json")
        if form not in ("json", "slack"):
            raise JobFileError(f"{what}: key 'format': {form!r} is not json or slack")
        found[name] = Destination(name, webhook=url, format=form)
    return found


def alert_rule(value: object, what: str, known: dict[str, Destination]) -> AlertRule:
    """A job's ``alert`` table, its destinations among ``known``."""
    if not isinstance(value, dict) or set(value) - ALERT_KEYS or "to" not in value:
        raise JobFileError(
            f'{what}: a table like {{ to = ["ops"], after = 3, recovered = true }} is required '
            f"(keys: {', '.join(sorted(ALERT_KEYS))})"
        )
    to = value["to"] if isinstance(value["to"], list) else [value["to"]]
    for name in to:
        if name not in known:
            raise JobFileError(f"{what}: to: no destination {name!r} in [alerts]")
    counts: dict[str, Any] = {}
    for name, default in (("after", 1), ("pause_after", None)):
        n = value.get(name, default)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise JobFileError(f"{what}: {name}: {n!r} is not an int >= 1")
        counts[name] = n
    recovered = value.get("recovered", False)
    if not isinstance(recovered, bool):
        raise JobFileError(f"{what}: recovered: {recovered!r} is not true or false")
    longer = value.get("running_longer")
    return AlertRule(
        tuple(to), counts["after"], recovered,
        None if longer is None else duration(longer, f"{what}: running_longer"),
        counts["pause_after"],
    )  # fmt: skip


def tags(value: object, what: str) -> tuple[str, ...]:
    """A job's ``tags``: a list of names (letters, digits, ``-``, ``_``, ``.``, ``:``)."""
    if not isinstance(value, list) or not all(
        isinstance(t, str) and re.fullmatch(r"[\w.:-]+", t) for t in value
    ):
        raise JobFileError(f'{what}: a list of names like ["etl", "finance"] is required')
    return tuple(sorted(set(value)))


@dataclass(frozen=True)
class Token:
    """A named token of ``[access]``: its scope and its SHA-256 (never the token)."""

    name: str
    scope: str
    sha256: str

    def to_json(self) -> dict[str, str]:
        """As the store keeps it."""
        return {"name": self.name, "scope": self.scope, "sha256": self.sha256}


def access(table: object, where: str) -> list[Token]:
    """``[access]``: ``NAME = { scope = "read" | "operate" | "admin", token = { env =
    "VARIABLE" } }`` (or ``sha256 = "..."``: the token's digest, so the file holds no
    secret)."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise JobFileError(f'{where} must be a table of NAME = {{ scope = "read", token = ... }}')
    found = []
    for name, value in table.items():
        what = f"{where}: {name!r}"
        if (
            not isinstance(value, dict)
            or set(value) - {"scope", "token", "sha256"}
            or len({"token", "sha256"} & set(value)) != 1
        ):
            raise JobFileError(
                f'{what}: {{ scope = "operate", token = {{ env = "VARIABLE" }} }} or '
                '{ scope = "read", sha256 = "<hex digest>" } is required'
            )
        scope = value.get("scope")
        if scope not in SCOPES:
            raise JobFileError(f"{what}: key 'scope': {scope!r} is not one of {', '.join(SCOPES)}")
        if "sha256" in value:
            digest = value["sha256"]
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise JobFileError(f"{what}: key 'sha256': 64 lowercase hex digits are required")
        else:
            digest = hashed(secret(value["token"], f"{what}: key 'token'"))
        found.append(Token(name, scope, digest))
    return found


def hashed(token: str) -> str:
    """A token's SHA-256, as ``[access]`` and the store keep it."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_file(path: str) -> list[Token]:
    """``$ROTA_TOKENS_FILE``: a TOML file with an ``[access]`` table (or its entries at
    the top level)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError(f"{path}: not valid TOML: {exc}") from None
    return access(data.get("access", data), f"{path}: [access]")
