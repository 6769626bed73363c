"""``deploy/``: the systemd unit passes ``systemd-analyze verify``; the Dockerfile's and
the Kubernetes probes' commands run here as written (no container runtime needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def _systemd_analyze() -> str:
    """``systemd-analyze``, installed from Debian's ``systemd`` when missing (as
    ``tests/postgres_server.py`` installs PostgreSQL)."""
    found = shutil.which("systemd-analyze")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "systemd"], check=True,
                       capture_output=True, timeout=600)  # fmt: skip
        found = shutil.which("systemd-analyze")
    assert found is not None, "systemd-analyze is not installable here"
    return found


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = (DEPLOY / "rota.service").read_text()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert "KillMode=mixed" in unit
    assert "Restart=on-failure" in unit
    here = unit.replace("/opt/rota/bin/rota", str(BIN / "rota")).replace(
        "/srv/rota", str(tmp_path)
    )
    (tmp_path / "rota.service").write_text(here)
    done = subprocess.run(
        [_systemd_analyze(), "verify", str(tmp_path / "rota.service")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "rota.service" not in done.stderr, done.stderr  # no complaint about it


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "ROTA_STORE": f"sqlite:///{tmp_path / 'rota.db'}",
    }


def test_the_dockerfile_commands_run_as_written(tmp_path: Path) -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    [cmd] = re.findall(r"^CMD (\[.*\])$", dockerfile, flags=re.MULTILINE)
    [health] = re.findall(r"^HEALTHCHECK .* CMD (.*)$", dockerfile, flags=re.MULTILINE)
    shutil.copy(DEPLOY / "jobs.example.toml", tmp_path / "jobs.toml")
    env = _env(tmp_path)
    log = tmp_path / "log"
    with log.open("w") as err:
        node = subprocess.Popen(json.loads(cmd), cwd=tmp_path, env=env, stderr=err)
    try:
        wait_until(lambda: "jobs loaded" in log.read_text(), 60)
        checked = subprocess.run(
            ["sh", "-c", health], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
        node.send_signal(signal.SIGTERM)
        assert node.wait(60) == 0, log.read_text()
    finally:
        node.kill()
        node.wait()


def test_the_kubernetes_probes_run_as_written(tmp_path: Path) -> None:
    manifest = (DEPLOY / "kubernetes.yaml").read_text()
    probes = [json.loads(p) for p in re.findall(r"exec: \{command: (\[.*\])\}", manifest)]
    assert len(probes) == 2
    env = _env(tmp_path)
    for probe in probes:  # no store yet: the liveness probe fails (exit 2), readiness too
        done = subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode != 0
    shutil.copy(DEPLOY / "jobs.example.toml", tmp_path / "jobs.toml")
    loaded = subprocess.Popen(
        ["rota", "run", "jobs.toml", "--store", env["ROTA_STORE"], "--live", "no"],
        cwd=tmp_path, env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: (tmp_path / "rota.db").exists() and subprocess.run(
            probes[1], cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
        ).returncode == 0, 60)  # fmt: skip
        for probe in probes:
            done = subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True,
                                  timeout=60, check=False)  # fmt: skip
            assert done.returncode == 0, done.stderr
    finally:
        loaded.send_signal(signal.SIGTERM)
        loaded.wait(60)


def test_the_container_stays_healthy_with_a_failing_job(tmp_path: Path) -> None:
    """The HEALTHCHECK failed for any failed job, against this page's own advice for
    Kubernetes (a failing job is an alert, not a reason to restart the scheduler)."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    [health] = re.findall(r"^HEALTHCHECK .* CMD (.*)$", dockerfile, flags=re.MULTILINE)
    env = _env(tmp_path)

    def healthy() -> bool:
        done = subprocess.run(["sh", "-c", health], cwd=tmp_path, env=env,
                              capture_output=True, timeout=60, check=False)  # fmt: skip
        return done.returncode == 0

    assert not healthy()  # no store: the node cannot work
    (tmp_path / "jobs.toml").write_text(
        '[[jobs]]\nid = "bad"\nat = "2020-01-01T00:00:00Z"\ncommand = "exit 3"\n'
    )
    node = subprocess.Popen(["rota", "run", "jobs.toml", "--store", env["ROTA_STORE"],
                             "--live", "no"], cwd=tmp_path, env=env,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        check = ["rota", "check", "--store", env["ROTA_STORE"]]
        wait_until(lambda: (tmp_path / "rota.db").exists() and subprocess.run(
            check, cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
        ).returncode == 1, 60)  # fmt: skip
        assert healthy()
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(60)
