"""Hand-off demo: a rota node publishes every slot to Redis; an RQ worker runs them.

A throwaway ``redis-server`` (Debian's, installed with ``apt-get`` when missing
and run as root), one durable rota node in this process handing a job that
falls due every 0.2 s to RQ for 3 s, and then RQ's own worker draining the queue:
every slot published once, with its key as the job's meta, and run once.

Run: ``python examples/handoff_demo.py`` (``make demo`` runs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rota import FixedRate, Runner, handoff
from rota.durable import DurableScheduler
from rota.store import SQLiteStore

HERE = Path(__file__).resolve().parent


def redis_server() -> str | None:
    """redis-server on the PATH, installed from Debian if missing (as root)."""
    found = shutil.which("redis-server")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "redis-server"]
        if subprocess.run(install, env=env, check=False, capture_output=True).returncode:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, check=True, capture_output=True)
        found = shutil.which("redis-server")
    return found


def main() -> int:
    binary = redis_server()
    if binary is None:
        print("handoff demo: no redis-server here (and not root to install it); skipped")
        return 0
    where = Path(tempfile.mkdtemp(prefix="rota-handoff-demo-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    server = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(where),
         "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        handoff.register_broker("demo", url)
        sched = DurableScheduler(SQLiteStore(where / "rota.db"))
        with Runner(sched):
            sched.schedule(
                "report", FixedRate(0.2), handoff.publish, max_retries=3,
                kwargs=handoff.message("rq", "handoff_worker.report", broker="demo",
                                       args=["daily"]),
            )  # fmt: skip
            time.sleep(3)
            sched.cancel("report")
        published = [o for o in sched.history("report", 1000) if o.result == "ok"]
        sched.store.close()
        print(f"the node published {len(published)} slots of 'report' to RQ, one per slot")
        out = where / "ran.txt"
        env = {**os.environ, "PYTHONPATH": str(HERE), "RAN": str(out)}
        rq = str(Path(sys.executable).with_name("rq"))
        subprocess.run(
            [rq, "worker", "--burst", "-w", "rq.worker.SimpleWorker", "-u", url, "-q"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        keys = out.read_text().split() if out.exists() else []
        expected = {f"report@{o.slot!r}" for o in published}
        once = len(keys) == len(set(keys)) and set(keys) == expected
        print(f"RQ's own worker ran {len(keys)} jobs: every slot {'once' if once else 'NOT once'}")
        return 0 if once else 1
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
