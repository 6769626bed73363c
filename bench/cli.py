"""``rota run`` as operators run it: runs per second and lag with 1, 50 and 200
one-second shell jobs, without and with the live view (on a pseudo-terminal), and the
node's memory while a job prints 400 MB.

Usage: ``python bench/cli.py`` (about two minutes); writes ``bench/results/cli.md``
and ``cli.json``. Each drain runs ``rota run`` for ``SECONDS`` seconds on a fresh
SQLite file, then reads the outcomes it recorded: runs per second and the p99 of
``started - slot`` (lag). The live view is measured on a real pseudo-terminal
(``pty.openpty``), as a user's terminal would show it.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import machine

ROOT = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("SECONDS_PER_RUN", "15"))
JOBS = (1, 50, 200)
PRINTED = 400_000_000


def _start(directory: Path, text: str, *, live: bool, extra: tuple[str, ...] = ()) -> Any:
    jobs = directory / "jobs.toml"
    jobs.write_text(text)
    argv = [sys.executable, "-m", "rota", *extra, "run", str(jobs), "--store",
            f"sqlite:///{directory / 's.db'}", "--workers", "16",
            "--live", "yes" if live else "no"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120"}
    if not live:
        return subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL), None
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)

    def drain() -> None:  # the terminal reads what is drawn, as a real one does
        while True:
            try:
                if not os.read(leader, 65536):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    return proc, leader


def drain(jobs: int, live: bool) -> dict[str, float]:
    """Runs/s and p99 lag (s) of ``jobs`` jobs due every second, for SECONDS."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        text = "".join(
            f'[[jobs]]\nid = "j{i:03}"\nevery = "1s"\ncommand = "true"\n' for i in range(jobs)
        )
        proc, leader = _start(directory, text, live=live)
        time.sleep(SECONDS)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        if leader is not None:
            os.close(leader)
        with sqlite3.connect(directory / "s.db") as db:
            rows = db.execute("SELECT slot, started FROM rota_outcomes").fetchall()
    lags = sorted(started - slot for slot, started in rows)
    p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))] if lags else float("nan")
    return {"runs": len(rows), "runs_per_s": len(rows) / SECONDS, "p99_lag_s": p99}


def _rss(pid: int) -> int:
    """Resident memory of ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def memory() -> dict[str, float]:
    """The node's RSS idle, then at most while one job prints PRINTED bytes (in lines of
    1,000 characters, each also written to the log)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        marker = directory / "go"
        command = (
            f"while [ ! -e {marker} ]; do sleep 0.1; done; "
            f"head -c {PRINTED} /dev/zero | tr '\\\\0' x | fold -w 1000"
        )
        text = '[[jobs]]\nid = "loud"\nevery = "1h"\nstart = "2020-01-01T00:00:00+00:00"\n'
        text += f'misfire = "coalesce"\ncommand = "{command}"\n'
        proc, _ = _start(directory, text, live=False)
        time.sleep(3)  # started, the job waiting for the marker
        idle = _rss(proc.pid)
        marker.touch()
        peak = idle
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            peak = max(peak, _rss(proc.pid))
            with sqlite3.connect(directory / "s.db") as db:
                if db.execute("SELECT count(*) FROM rota_outcomes").fetchone()[0]:
                    break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    return {"idle_mib": idle / 2**20, "peak_mib": peak / 2**20}


def main() -> None:
    results: dict[str, Any] = {"seconds": SECONDS, "drains": {}}
    for jobs in JOBS:
        for live in (False, True):
            key = f"{jobs} jobs, {'live view' if live else 'no view'}"
            results["drains"][key] = drain(jobs, live)
            print(key, results["drains"][key], file=sys.stderr)
    results["memory"] = memory()
    print("memory", results["memory"], file=sys.stderr)
    out = ROOT / "bench" / "results"
    (out / "cli.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [
        f"Command: `python bench/cli.py` ({SECONDS:g} s per drain, one-second shell jobs "
        "`true`, 16 workers, SQLite)",
        "",
        f"Machine: {machine()}",
        "",
        "| jobs | view | runs/s | expected | p99 lag (s) | runs with the view / without |",
        "|---|---|---|---|---|---|",
    ]
    for jobs in JOBS:
        plain = results["drains"][f"{jobs} jobs, no view"]
        for live in (False, True):
            got = results["drains"][f"{jobs} jobs, {'live view' if live else 'no view'}"]
            ratio = f"{got['runs'] / plain['runs']:.2f}" if live and plain["runs"] else ""
            lines.append(f"| {jobs} | {'live' if live else 'none'} | {got['runs_per_s']:,.1f} "
                         f"| {jobs} | {got['p99_lag_s']:.3f} | {ratio} |")  # fmt: skip
    mem = results["memory"]
    lines += [
        "",
        f"Memory while one job prints {PRINTED / 1e6:,.0f} MB (1,000-character lines, each "
        f"also logged): RSS {mem['idle_mib']:.1f} MiB idle, {mem['peak_mib']:.1f} MiB at "
        f"most (+{mem['peak_mib'] - mem['idle_mib']:.1f} MiB).",
    ]
    (out / "cli.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
