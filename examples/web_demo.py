"""The dashboard, shown: a node runs ``examples/jobs.toml`` and serves its dashboard,
its API and ``/metrics``.

``python examples/web_demo.py`` (what ``make demo`` ends with) starts the node on
127.0.0.1 (port 8787, or a free one if that is taken), waits for a few runs, prints
the dashboard's URL and what the API and ``/metrics`` answer, then stops it.
``--keep`` (``make web-demo``) leaves it running until Ctrl-C, for you to open the
URL; ``--screenshots DIR`` saves the jobs page and a job's page as PNGs there
(Playwright, in Debian's Chromium: how ``docs/web-*.png`` were made).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "examples" / "jobs.toml"


def free(port: int) -> int:
    """``port`` if nothing listens there, else 0 (a free one, chosen by the node)."""
    with socket.socket() as probe:
        return port if probe.connect_ex(("127.0.0.1", port)) != 0 else 0


def start(store: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``rota run jobs.toml --web``: the process, and the URL it printed."""
    port = free(8787)
    command = [sys.executable, "-m", "rota", "run", str(JOBS), "--store", store,
               "--live", "no", "--web", f"127.0.0.1:{port}"]  # fmt: skip
    print(f"$ rota run {JOBS.name} --store {store} --web 127.0.0.1:{port}", flush=True)
    with log.open("w") as err:
        node = subprocess.Popen(command, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 30
    while not (found := re.search(r"dashboard at (http://\S+/)", log.read_text())):
        if node.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"the node did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return node, found.group(1)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def screenshots(url: str, directory: Path) -> None:
    """The jobs page and the flaky job's page, as the README and docs/web.md show them."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("ROTA_CHROMIUM") or shutil.which("chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 640})
        page.goto(url)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(directory / "web-jobs.png"))
        page.goto(url + "jobs/flaky")
        page.wait_for_timeout(1500)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.screenshot(path=str(directory / "web-job.png"))
        browser.close()
    print(f"saved {directory / 'web-jobs.png'} and {directory / 'web-job.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the node running (Ctrl-C)")
    parser.add_argument("--seconds", type=float, default=8, help="runs to wait for first")
    parser.add_argument("--screenshots", type=Path, metavar="DIR")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rota-web-"))
    node, url = start(f"sqlite:///{scratch}/demo.db", scratch / "node.log")
    try:
        time.sleep(args.seconds)
        jobs = json.loads(get(url + "api/jobs"))
        print(f"\n$ curl {url}api/jobs")
        for job in jobs:
            print(f"  {job['id']:16} {job['status']:10} last: {job['last']}")
        metrics = [line for line in get(url + "metrics").splitlines()
                   if line.startswith("rota_runs_total")]  # fmt: skip
        print(f"\n$ curl {url}metrics | grep rota_runs_total")
        for line in metrics:
            print(f"  {line}")
        if args.screenshots:
            screenshots(url, args.screenshots)
        print(f"\nThe dashboard of the running demo node: {url}")
        if args.keep:
            print("(open it in a browser; Ctrl-C stops the node)", flush=True)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
