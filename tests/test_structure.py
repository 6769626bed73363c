"""The structure the redesign (issue 43) measured, held: one Scheduler over a table,
the durable half split by job, no module too big to read, no import cycle, and
runners and tests that drive the :class:`rota.Tasks` seam, not privates
(``docs/design.md``, "The floor plan"). Each bound is the issue's; a change that
breaks one splits the code or argues for the bound there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rota"
SOURCES = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {path: ast.parse(text) for path, text in SOURCES.items()}
DURABLE = [path for path in SOURCES if path.parent.name == "durable"]


def lines(path: Path) -> int:
    return len(SOURCES[path].splitlines())


def methods(name: str) -> set[str]:
    (found,) = [
        node
        for tree in TREES.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == name
    ]
    return {n.name for n in found.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_durable_scheduler_overrides_only_its_construction() -> None:
    """DurableScheduler is the Scheduler over a StoredTasks: every API method has one
    body, in Scheduler; it adds what only a store has."""
    assert methods("DurableScheduler") & methods("Scheduler") <= {"__init__", "__repr__"}
    assert not any("ignore[override]" in text for text in SOURCES.values())


def test_no_module_or_durable_class_outgrows_its_bound() -> None:
    sizes = {path.relative_to(PACKAGE).as_posix(): lines(path) for path in SOURCES}
    assert max(sizes.values()) <= 800, max(sizes.items(), key=lambda item: item[1])
    durable = {path.name: lines(path) for path in DURABLE}
    assert max(durable.values()) <= 450, max(durable.items(), key=lambda item: item[1])
    classes = {
        node.name: node.end_lineno - node.lineno + 1  # type: ignore[operator]
        for path in DURABLE
        for node in ast.walk(TREES[path])
        if isinstance(node, ast.ClassDef)
    }
    assert max(classes.values()) <= 400, max(classes.items(), key=lambda item: item[1])


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module's imports of rota's modules (``from pkg import mod``: the module)."""
    names = {module_of(path): path for path in SOURCES}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(TREES[path]):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = own.split(".")[: len(own.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t for t in subs if t in names] or [base]
            for imported in targets:
                target = imported
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def test_no_import_cycle() -> None:
    graph = imports()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(" -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_runners_and_tests_drive_the_seam_not_privates() -> None:
    runners = [p for p in SOURCES if re.search(r"(driver|runner|async)", p.name)]
    for path in runners:
        found = re.findall(r"\b(?:scheduler|self\._scheduler|self\._s)\._[a-z]\w*", SOURCES[path])
        assert not found, (path.name, found)
    for path in (ROOT / "tests").rglob("*.py"):
        found = re.findall(r"\._(?:claim|complete\w*|start)\(", path.read_text())
        assert not found, (path.name, found)
