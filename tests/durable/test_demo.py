"""The durability demo (what ``make demo`` shows) runs and checks what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_durable_demo_loses_no_slot_across_a_sigkill() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "durable_demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "consecutive slots, each completed once" in done.stdout
