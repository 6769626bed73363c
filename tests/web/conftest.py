"""The dashboard's fixtures: a running node (or ``rota web``) serving it, real
processes on real stores, and a real headless Chromium driven by Playwright."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import ROOT, Cli, cli

URL = re.compile(r"dashboard at (http://\S+/)")


class Served:
    """A ``rota`` process serving the dashboard: its URL, its log, its process."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        deadline = time.monotonic() + 60
        while not (found := URL.search(log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no dashboard URL (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        self.url = found.group(1)

    def stop(self) -> str:
        """SIGTERM, then what it logged; it must exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.log.read_text()
        return self.log.read_text()


def serve_node(cli: Cli, *extra: str) -> Served:
    """``rota run`` on the job file with ``--web 127.0.0.1:0``."""
    log = cli.dir / f"node{len(cli.procs)}.log"
    proc = cli.start("--web", "127.0.0.1:0", *extra, log=log)
    return Served(proc, log)


def serve_web(cli: Cli, *extra: str) -> Served:
    """``rota web`` on the store (it runs no jobs)."""
    log = cli.dir / f"web{len(cli.procs)}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rota", "web", "--store", cli.store,
             "--listen", "127.0.0.1:0", *extra],
            cwd=cli.dir, env=cli.env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    cli.procs.append(proc)
    return Served(proc, log)


def chromium_path() -> str:
    """Debian's Chromium (``make test`` installs it); missing: a skip, or in CI a failure."""
    found = os.environ.get("ROTA_CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    message = "no Chromium: run the suite through `make test` (it installs Debian's chromium)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session (each test opens its own context)."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=path, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (own cookies). Every dialog it opens is recorded in ``page.dialogs``
    as ``(type, message)``; a confirm (the cancel button's) is accepted."""
    context = browser.new_context()
    tab = context.new_page()
    tab.dialogs = []

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append((dialog.type, dialog.message))
        if dialog.type == "confirm":
            dialog.accept()
        else:
            dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.set_default_timeout(10_000)
    try:
        yield tab
    finally:
        context.close()


__all__ = ["ROOT", "Cli", "Served", "cli", "serve_node", "serve_web"]
