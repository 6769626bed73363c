"""A pool from a job file (``[pools]``, ``pool =``) on two real ``rota run`` nodes
sharing one SQLite store: never more runs of the pool at once than its size across
both nodes; a run that waits shows ``queued``, waiting for the pool, in ``rota
status``; ``/metrics`` has the pool's size and use; the Nodes page shows it, in a real
Chromium."""

from __future__ import annotations

import itertools
import re
import signal
import urllib.request
from typing import Any

from tests.cli.conftest import Cli
from tests.web.conftest import serve_node

JOBS = "".join(
    f'[[jobs]]\nid = "load-{name}"\nevery = "1s"\ncommand = "sleep 0.4"\npool = "warehouse"\n'
    for name in "abc"
)


def _metric(url: str, name: str) -> float | None:
    text = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    found = re.search(rf'^{name}\{{pool="warehouse"\}} (\S+)$', text, re.M)
    return None if found is None else float(found.group(1))


def test_a_pool_holds_across_two_nodes_and_is_shown(cli: Cli, page: Any) -> None:
    cli.write("[pools]\nwarehouse = 1\n[defaults]\nmax_retries = 0\n" + JOBS)
    node = serve_node(cli)
    other = cli.start()  # a second node on the same store
    queued: list[Any] = []

    def waiting() -> bool:
        entries = cli.json("status") if cli.loaded() else []
        queued[:] = [e for e in entries if e["waiting_for"] == ["pool:warehouse"]]
        return bool(queued)

    cli.wait(waiting, timeout=30)  # three jobs of 0.4 s a second, one place: runs wait
    assert queued[0]["status"] == "queued"
    assert "waiting (pool:warehouse)" in cli("status").stdout
    assert _metric(node.url, "rota_pool_size") == 1.0
    used = _metric(node.url, "rota_pool_in_use")
    assert used is not None
    assert used <= 1
    page.goto(node.url + "nodes")
    pool = page.locator("tr.pool")
    assert pool.locator("td").first.inner_text() == "warehouse"
    assert pool.locator("td").nth(2).inner_text() == "1"
    cli.wait(lambda: sum(len(cli.json("history", f"load-{n}")) for n in "abc") >= 8)
    other.send_signal(signal.SIGTERM)
    assert other.wait(60) == 0
    node.stop()
    runs = [o for n in "abc" for o in cli.json("history", f"load-{n}", "--limit", "100")]
    assert {o["result"] for o in runs} == {"ok"}
    ends = sorted([(o["started"], 1) for o in runs] + [(o["finished"], -1) for o in runs])
    assert max(itertools.accumulate(step for _, step in ends)) == 1  # never two at once
