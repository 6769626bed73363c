"""The README's Python examples run and say what they claim."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


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
