"""Which stored actions a node runs, and the functions they name.

A stored task names its action: a name some process registered, or an import
path (``"package.module:function"``). Whoever can write the store can name any
path, so a node runs only the names it registered, the paths it stored itself
and those its ``imports=`` option admits (``docs/security.md``). What it cannot
run (a path that fails to import here, a row it cannot read) it leaves,
untouched, to nodes that can: :meth:`Actions.known` says so to the store's
claims.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from rota._core import codec as _codec
from rota._core import validate as _validate
from rota.store import Known

logger = logging.getLogger("rota.durable")


class Actions:
    """A node's actions: ``named`` (registered names), the import paths it stored,
    those ``imports`` admits (``True``: any; ``False``: none more; a collection of
    prefixes), resolved once each; and the ``refused`` task ids whose rows it could
    not read. Raises ``TypeError``/``ValueError`` for a bad ``imports``."""

    __slots__ = ("_broken", "_declared", "_prefixes", "_resolved", "named", "refused")

    def __init__(self, imports: bool | Collection[str]) -> None:
        self._prefixes = _import_prefixes(imports)
        self._declared: set[str] = set()  # import paths this process stored
        self._resolved: dict[str, Callable[..., object]] = {}  # import paths, imported
        self._broken: set[str] = set()  # import paths that failed to import here
        self.named: dict[str, Callable[..., object]] = {}
        """Registered names and their functions."""
        self.refused: frozenset[str] = frozenset()
        """Tasks whose rows this node could not read (replaced, never changed: read by
        other threads)."""

    def register(self, name: str, action: Callable[..., object]) -> None:
        """Run ``action`` for tasks that name ``name``. O(1). Raises ``TypeError`` for
        a non-str name or a non-callable action, ``ValueError`` for an empty name, one
        with ``:`` (that is an import path) or one registered to another function."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if not name or ":" in name:
            raise ValueError(f"name must be non-empty and without ':', got {name!r}")
        _validate.callable_("action", action)
        known = self.named.get(name)
        if known is not None and known is not action:
            raise ValueError(f"name {name!r} is registered to {known!r} already")
        self.named[name] = action

    def reference(self, action: object) -> tuple[str, Callable[..., object]]:
        """The stored name of an action given to a scheduling call (a registered name,
        an import path, a registered or module-level function) and the function it
        names; an import path is declared (this node runs it). O(names). Raises
        ``TypeError`` for one that cannot be stored or imported."""
        if isinstance(action, str):
            if ":" in action:
                try:
                    found = _codec.resolve_path(action)
                except (ImportError, AttributeError, ValueError) as exc:
                    raise TypeError(f"action {action!r} cannot be imported: {exc!r}") from None
                _validate.callable_("action", found)
                self._declared.add(action)
                return action, found
            registered = self.named.get(action)
            if registered is None:
                raise TypeError(
                    f"action {action!r} is not registered with this scheduler (known: "
                    f"{sorted(self.named)}); register it, or give 'module:function'"
                )
            return action, registered
        _validate.callable_("action", action)
        for name, registered in self.named.items():
            if registered is action:
                return name, registered
        path = _codec.import_path(action)
        if path is None:
            raise _codec.refusal(action)
        self._declared.add(path)
        return path, action  # type: ignore[return-value]

    def function(self, name: str) -> Callable[..., object] | None:
        """The function a stored action name means here, or ``None`` if this node
        cannot run it (a path that fails to import is logged once, then left to
        others). O(1) once resolved."""
        found = self.named.get(name) or self._resolved.get(name)
        if found is None and name in self.known() and ":" in name:
            try:
                found = _codec.resolve_path(name)
            except Exception as exc:
                logger.warning("action %r cannot be imported here (%r): left to others", name, exc)
                self._broken.add(name)
                return None
            self._resolved[name] = found
        return found

    def known(self) -> Known:
        """What this node claims: its registered names and declared import paths, the
        paths its ``imports`` admit, but no broken path or refused row. O(names)."""
        return Known(
            (*self.named, *self._declared), tuple(self._broken), self.refused, self._prefixes
        )

    def refuse(self, task_id: str) -> bool:
        """Claim ``task_id`` no more; whether it was claimable until now. O(refused)."""
        if task_id in self.refused:
            return False
        self.refused = self.refused | {task_id}
        return True


def _import_prefixes(imports: Any) -> tuple[str, ...]:
    """The ``imports=`` option as :attr:`Known.prefixes`, or ``TypeError``/``ValueError``."""
    if imports is True:
        return ("",)
    if imports is False:
        return ()
    if isinstance(imports, str) or not isinstance(imports, Collection):
        raise TypeError(
            f"imports must be a bool or a collection of module prefixes, got {imports!r}"
        )
    prefixes = tuple(imports)
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"imports must hold non-empty str prefixes, got {prefix!r}")
    return prefixes
