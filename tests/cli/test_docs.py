"""Every example in docs/cli.md runs, exits as it says, and prints what it shows."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


def examples() -> list[tuple[str, int, bool, list[str]]]:
    """(command line, exit status, exact output?, output lines) for each ``$ rota`` line."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.DOTALL):
        for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            first, *output = chunk.rstrip("\n").split("\n")
            command, _, comment = first.partition("   # ")
            status = int(m.group(1)) if (m := re.search(r"exit (\d+)", comment)) else 0
            found.append((command, status, "e.g." not in comment and "runs until" not in comment,
                          output))  # fmt: skip
    return found


def test_every_cli_doc_example(tmp_path: Path) -> None:
    toml = re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)[0]
    (tmp_path / "jobs.toml").write_text(toml)
    (tmp_path / "bad.toml").write_text(
        '[[jobs]]\nid = "x"\nevery = "5 minutes"\ncommand = "true"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = 0
    for command, status, exact, output in examples():
        argv = [sys.executable, "-m", *command.split()]
        assert argv[2] == "rota", command
        if " run " in command:  # runs until SIGTERM
            proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
            time.sleep(2)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert all(json.loads(line) for line in err.splitlines())  # --log-format json
            ran += 1
            continue
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == status, (command, done.stderr)
        shown = (done.stdout + done.stderr).splitlines()
        if exact:
            assert [line for line in shown if "runs of" not in line] == output, command
        elif "--json" in command:
            json.loads(done.stdout)
        ran += 1
    assert ran >= 12
