"""The HTTP API, ``/metrics`` and ``/healthz`` over real HTTP, against ``rota web``
and ``rota run --web``, on SQLite and PostgreSQL; and the rules for serving."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.conftest import Cli
from tests.web.conftest import Served, serve_node, serve_web
from tests.web.test_browser import SECONDLY, history, job

PASSWORD = "s3cretpw-Zq9"


def call(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, str, str]:
    """(status, content type, body) of one request."""
    request = urllib.request.Request(url, method=method, headers=headers or {},
                                     data=body if method == "POST" else None)  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


@pytest.fixture(params=["sqlite", "postgres"])
def store_cli(request: pytest.FixtureRequest, cli: Cli) -> Iterator[Cli]:
    """The command's fixture on SQLite, or on a PostgreSQL database of its own with a
    password in the URL (the test server trusts loopback: the password is never
    checked, only hidden)."""
    if request.param == "sqlite":
        yield cli
        return
    import psycopg

    dsn = request.getfixturevalue("pg_dsn")
    dbname = request.getfixturevalue("pg_prefix").rstrip("_")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {dbname}")
    params = dict(part.split("=", 1) for part in dsn.split())
    cli.store = (
        f"postgresql://{params['user']}:{PASSWORD}@{params['host']}:{params['port']}/{dbname}"
    )
    try:
        yield cli
    finally:
        cli.kill_all()  # before its database is dropped
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(f"DROP DATABASE {dbname} WITH (FORCE)")


def test_the_api_and_metrics_of_a_node_and_of_rota_web(store_cli: Cli) -> None:
    cli = store_cli
    cli.write(
        job("ok-job", "echo hello")
        + job("bad-job", "echo nope; exit 4")
        + job("often", "true", SECONDLY)
    )
    node = serve_node(cli)
    web = serve_web(cli)
    try:
        cli.wait(lambda: history(cli, "bad-job") != [] and history(cli, "ok-job") != [], 30)
        for served in (node, web):
            _check_api(cli, served)
        _check_metrics(node, own_runs=True)
        _check_metrics(web, own_runs=False)
        # a control through one reaches the node and shows through the other
        status, _, body = call(web.url + "api/jobs/often/pause", "POST")
        assert status == 200, body
        assert json.loads(body)["paused"] is True
        status, _, body = call(node.url + "api/jobs/often")
        assert json.loads(body)["paused"] is True
        assert call(web.url + "api/jobs/often/pause", "POST")[0] == 409
        assert call(web.url + "api/jobs/often/resume", "POST")[0] == 200
        assert call(web.url + "api/jobs/nope/trigger", "POST")[0] == 404
        assert call(web.url + "api/jobs/nope/history")[0] == 404
        # another origin's browser request changes nothing, even without a token
        refused = call(web.url + "api/jobs/often/pause", "POST",
                       {"Origin": "http://evil.example"})  # fmt: skip
        assert refused[0] == 403
        assert json.loads(call(web.url + "api/jobs/often")[2])["paused"] is False
    finally:
        logs = node.stop() + web.stop()
    assert PASSWORD not in logs


def _check_api(cli: Cli, served: Served) -> None:
    status, kind, body = call(served.url + "api/jobs")
    assert status == 200
    assert kind.startswith("application/json")
    api = {j["id"]: j for j in json.loads(body)}
    command = {j["id"]: j for j in cli.json("status")}
    assert set(api) == set(command) == {"ok-job", "bad-job", "often"}
    for job_id, entry in command.items():
        assert set(api[job_id]) == set(entry)  # the same keys
        # "often" runs every second: its status may change between the two reads
        for key in ("id", "paused") if job_id == "often" else ("id", "status", "paused"):
            assert api[job_id][key] == entry[key]
    status, kind, body = call(served.url + "api/jobs/bad-job/history?limit=1")
    assert status == 200
    [run] = json.loads(body)
    [expected] = json.loads(cli("history", "bad-job", "--json", "--limit", "1").stdout)
    assert run == expected
    assert "exit status 4" in run["error"]
    assert call(served.url + "api/jobs/bad-job/history?limit=0")[0] == 400
    assert call(served.url + "healthz")[:3:2] == (200, '{"ok":true}')
    for path in ("", "jobs/bad-job", "failures", "nodes", "api/jobs", "metrics"):
        status, _, text = call(served.url + path)
        assert status == 200, path
        assert PASSWORD not in text, path
    assert call(served.url + "jobs/nope")[0] == 404


def _check_metrics(served: Served, *, own_runs: bool) -> None:
    status, kind, text = call(served.url + "metrics")
    assert status == 200
    assert kind.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values() for s in f.samples
    }  # fmt: skip
    assert samples[("rota_next_run_timestamp_seconds", (("job", "ok-job"),))] > 0
    assert ("rota_last_success_timestamp_seconds", (("job", "ok-job"),)) in samples
    assert ("rota_last_success_timestamp_seconds", (("job", "bad-job"),)) not in samples
    assert sum(v for (name, _), v in samples.items() if name == "rota_jobs") >= 3
    for name in ("rota_runs", "rota_run_duration_seconds", "rota_run_lag_seconds"):
        assert families[name].type in ("counter", "histogram")
    failed = samples.get(("rota_runs_total", (("job", "bad-job"), ("result", "failed"))))
    if own_runs:
        assert failed == 1
        assert samples[("rota_run_lag_seconds_count", (("job", "ok-job"),))] >= 1
    else:
        assert failed is None  # runs nothing: counts nothing


def test_serving_refuses_what_it_must_before_serving(cli: Cli, tmp_path: Path) -> None:
    def web(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rota", "web", *args], cwd=tmp_path, env=cli.env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    done = web("--store", cli.store, "--listen", "0.0.0.0:0")
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr
    assert "http://" not in done.stderr
    done = web("--store", f"sqlite:///{tmp_path / 'none.db'}")
    assert done.returncode == 2
    assert not (tmp_path / "none.db").exists()
    done = web("--listen", "nonsense")
    assert done.returncode == 2
    assert "HOST:PORT" in done.stderr


def test_a_token_guards_every_post_and_leaves_gets_readable(cli: Cli) -> None:
    cli.write(job("guarded", "true"))
    node = serve_node(cli)  # creates the store
    cli.wait(lambda: history(cli, "guarded") != [], 30)
    cli.env["ROTA_TOKEN"] = "tok-123"
    web = serve_web(cli, "--listen", "0.0.0.0:0")  # a token: any address
    try:
        assert call(web.url.replace("0.0.0.0", "127.0.0.1") + "api/jobs")[0] == 200
        url = web.url.replace("0.0.0.0", "127.0.0.1") + "api/jobs/guarded/pause"
        assert call(url, "POST")[0] == 401
        assert call(url, "POST", {"Authorization": "Bearer wrong"})[0] == 401
        assert json.loads(call(node.url + "api/jobs/guarded")[2])["paused"] is False
        status, _, body = call(url, "POST", {"Authorization": "Bearer tok-123",
                                             "Content-Type": "application/json"},
                               json.dumps({"note": "maintenance"}).encode())  # fmt: skip
        assert status == 200, body
        assert json.loads(body)["paused"] is True
    finally:
        logs = node.stop() + web.stop()
    assert "tok-123" not in logs
    assert "token from" in logs  # the action's line says who
    assert "maintenance" in logs
