"""A store's schema versions: forward-only migration steps, and the one-time rename
of a store written before the project was renamed (cadence to rota)."""

from __future__ import annotations

from collections.abc import Callable

from rota._core.types import StoreError


def migrate(version: int, steps: list[list[str]], run: Callable[[str], object], where: str) -> int:
    """Apply the forward-only schema ``steps`` after ``version`` with ``run``; the new version.

    Step k takes version k to k + 1. Raises :class:`StoreError` for a version
    newer than the steps know (rows are never deleted or rewritten to fit).
    """
    if version > len(steps):
        raise StoreError(
            f"{where}: schema version {version} is newer than this version of rota "
            f"(schema {len(steps)}); upgrade rota. Nothing was changed."
        )
    for step in steps[version:]:
        for statement in step:
            run(statement)
    return len(steps)


DEFAULT_PREFIX = "rota_"
"""The prefix of a store's tables (``rota_tasks``, ``rota_outcomes``, ``rota_meta``)
unless it is given another."""

FORMER_PREFIX = "cadence_"
"""The default prefix before the project was renamed from cadence to rota (its name
was taken by Uber's workflow engine): a store that finds only tables of this prefix
takes them over (:func:`former_tables`)."""

FORMER_PACKAGE, PACKAGE = "cadence.", "rota."
"""The import package's name before and after the rename, as stored import paths
begin (``cadence.cli._command:run_command``): see :func:`renamed_actions_sql`."""

FORMER_TABLES = ("meta", "tasks", "outcomes")


def former_tables(prefix: str, exists: Callable[[str], bool]) -> list[tuple[str, str]]:
    """The tables to rename, ``(old, new)``, to open a store written before the
    project's rename: none unless ``prefix`` is :data:`DEFAULT_PREFIX`, no table of
    its own exists yet and the former default's do (``exists(name)``: whether a table
    of that name exists). Each store renames them, and their indexes, in the
    transaction that then migrates the schema forward, so a store is either wholly
    renamed and current or untouched. O(1) lookups."""
    if prefix != DEFAULT_PREFIX or exists(f"{prefix}meta") or not exists(f"{FORMER_PREFIX}meta"):
        return []
    return [(f"{FORMER_PREFIX}{name}", f"{prefix}{name}") for name in FORMER_TABLES]


def renamed_actions_sql(p: str) -> str:
    """Schema step 4, the same in every dialect: stored import paths of the package's
    former name (a command job's ``cadence.cli._command:run_command``, a hand-off's
    ``cadence.handoff:publish``) are rewritten to the new name, so a node of this code
    claims and runs them."""
    n = len(FORMER_PACKAGE)
    return (
        f"UPDATE {p}tasks SET action = '{PACKAGE}' || substr(action, {n + 1}) "
        f"WHERE substr(action, 1, {n}) = '{FORMER_PACKAGE}'"
    )


def is_current(version: int | None, steps: list[list[str]], where: str) -> bool:
    """Whether a stored schema ``version`` (``None``: none yet) needs no migration step,
    so opening the store is a read. Raises :class:`StoreError` for a newer one, as
    :func:`migrate` does."""
    if version is None or version < len(steps):
        return False
    migrate(version, steps, _no_step, where)
    return True


def _no_step(statement: str) -> None:
    raise AssertionError(f"no migration step is due, got {statement!r}")
