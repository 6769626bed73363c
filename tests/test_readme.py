"""The Python examples in the README and docs run and say what they claim."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).parent.parent
README = ROOT / "README.md"


def blocks(path: pathlib.Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_readme_examples_run_and_print_what_they_show() -> None:
    found = blocks()
    assert len(found) >= 2
    namespace: dict[str, object] = {}  # shared, as in one session
    for block in found:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), namespace)
        shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
        if shown:
            assert out.getvalue().splitlines() == shown


def test_policy_doc_examples_run() -> None:
    found = blocks(ROOT / "docs" / "policies.md")
    assert len(found) >= 6
    for block in found:
        exec(compile(block, "docs/policies.md", "exec"), {})


def test_guide_examples_run() -> None:
    found = blocks(ROOT / "docs" / "guide.md")
    assert len(found) >= 7
    for block in found:
        exec(compile(block, "docs/guide.md", "exec"), {})


def test_migration_examples_run() -> None:
    found = blocks(ROOT / "docs" / "migrating.md")
    assert len(found) == 2  # the "after" programs; the "before" ones are ```py
    for block in found:
        exec(compile(block, "docs/migrating.md", "exec"), {})


def test_durability_doc_examples_run() -> None:
    found = blocks(ROOT / "docs" / "durability.md")
    assert len(found) >= 2
    for block in found:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "docs/durability.md", "exec"), {})
        shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
        if shown:
            assert out.getvalue().splitlines() == shown


def test_dependencies_doc_examples_run() -> None:
    found = blocks(ROOT / "docs" / "dependencies.md")
    assert len(found) == 1
    for block in found:
        exec(compile(block, "docs/dependencies.md", "exec"), {})


def test_operations_doc_examples_run() -> None:
    found = blocks(ROOT / "docs" / "operations.md")
    assert len(found) >= 1
    for block in found:
        exec(compile(block, "docs/operations.md", "exec"), {})
