"""The tree is the floor plan: imports point down, and no package reaches into another's
privates (``docs/design.md``, "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

FLOORS = {
    # 0: the deterministic core and the public policies (no I/O, no threads, no sleeping)
    "_core": 0, "schedules": 0, "retry": 0, "misfire": 0, "overlap": 0, "cron": 0, "tracing": 0,
    "calendars": 0,
    "store": 1,  # rows, leases and fences
    "_scheduling": 2, "durable": 2,  # the scheduler and its tables
    "_runners": 3,  # what waits and owns loops
    "__main__": 4, "cli": 4, "handoff": 4, "metrics": 4, "observe": 4, "report": 4,
    "testing": 4, "web": 4,
}  # fmt: skip
"""The floor of each folder (or public module) directly under ``rota``."""


def floor(module: str) -> int:
    """The floor of a module of rota: its first path component's (``rota.store._sqlite``
    -> ``store`` -> 1); ``rota`` itself, the public names, is the top."""
    parts = module.split(".")
    return 4 if len(parts) == 1 else FLOORS[parts[1]]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "rota").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def package(module: str, path: Path) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to itself)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(module imported, name imported from it or None, line) for each import of rota."""
    found: list[tuple[str, str | None, int]] = []
    own = package(module, path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("rota")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own.split(".")[: len(own.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("rota"):
                found += [(base, a.name, node.lineno) for a in node.names]
    return found


def resolved(
    found_imports: list[tuple[str, str | None, int]], found: dict[str, Path]
) -> list[tuple[str, str | None, int]]:
    """The imports with a name that is a module (``from rota import _validate``)
    turned into an import of that module."""
    return [
        (f"{target}.{name}", None, line)
        if name is not None and f"{target}.{name}" in found
        else (target, name, line)
        for target, name, line in found_imports
    ]


def test_every_import_points_down_or_sideways() -> None:
    found = modules()
    wrong = []
    for module, path in found.items():
        for target, _, line in resolved(imports(module, path), found):
            if floor(target) > floor(module):
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {target} (floor "
                             f"{floor(target)} above {floor(module)})")  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_no_package_imports_another_packages_private_names() -> None:
    """A private name (``_x``) is imported only inside its own package; a subpackage's
    private modules (``rota.durable._codec``) only from that subpackage. The core's
    modules (``rota._core.engine``) are the floor everything stands on: importable, but
    only their public names."""
    found = modules()
    wrong = []
    for module, path in found.items():
        own = package(module, path)
        for target, name, line in resolved(imports(module, path), found):
            home = package(target, found[target]) if target in found else target
            if home == own:
                continue
            private_module = any(p.startswith("_") for p in target.split(".")[2:])
            if private_module or (name is not None and _private(name)):
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {target}"
                             + ("" if name is None else f".{name}"))  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_the_floors_cover_every_module() -> None:
    assert {floor(m) for m in modules()} == {0, 1, 2, 3, 4}


def _private(name: str) -> bool:
    """``_x`` is private; a dunder (``__version__``) is the module's public face."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
