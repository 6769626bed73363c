"""Every recipe in docs/recipes.md runs, against the real framework where there is one."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from datetime import UTC, datetime
from typing import Any

import pytest

from rota.store import SQLiteStore
from tests.test_readme import blocks

RECIPES = pathlib.Path(__file__).parent.parent / "docs" / "recipes.md"


def recipe(title: str) -> str:
    """The python block of the recipe whose heading starts with ``title``."""
    section = RECIPES.read_text().split("\n## " + title, 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return str(block)


def module(name: str, code: str) -> Any:
    mod = types.ModuleType(name)
    exec(compile(code, f"docs/recipes.md ({name})", "exec"), mod.__dict__)
    return mod


def test_every_block_is_tested() -> None:
    assert len(blocks(RECIPES)) == 6


def test_fastapi_lifespan() -> None:
    from fastapi.testclient import TestClient

    app = module("recipe_fastapi", recipe("FastAPI")).app
    with TestClient(app) as client:
        got = client.get("/jobs").json()
    assert [job["id"] for job in got] == ["refresh-cache"]
    assert got[0]["next"] > datetime.now(UTC).timestamp()


def test_django_app_config(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import django
    from django.conf import settings

    package = tmp_path / "recipeapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "apps.py").write_text(recipe("Django"))
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.configure(INSTALLED_APPS=["recipeapp.apps.JobsConfig"])
    django.setup()
    apps = sys.modules["recipeapp.apps"]
    try:
        assert apps.runner.is_running
        assert apps.scheduler.status("purge-sessions") == "scheduled"
    finally:
        apps.runner.stop()


def test_flask_factory() -> None:
    app = module("recipe_flask", recipe("Flask")).create_app()
    try:
        assert app.test_client().get("/jobs").get_json() == ["heartbeat"]
        assert app.extensions["rota"].is_running
    finally:
        app.extensions["rota"].stop()


def test_gunicorn_workers_elect_one_scheduler(tmp_path: pathlib.Path) -> None:
    (tmp_path / "election.py").write_text(recipe("gunicorn"))
    worker = textwrap.dedent(
        """
        import sys
        from election import claim_scheduler
        print(claim_scheduler(), flush=True)
        sys.stdin.readline()  # stay alive (holding the lock) until the test is done
        """
    )
    env = {"ROTA_LOCK": str(tmp_path / "lock"), "PYTHONPATH": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", worker],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    try:
        answers = [proc.stdout.readline().strip() for proc in procs if proc.stdout]
    finally:
        for proc in procs:
            proc.communicate("\n", timeout=10)
    assert sorted(answers) == ["False", "False", "True"]


def test_gunicorn_workers_share_one_durable_schedule(tmp_path: pathlib.Path) -> None:
    """Three real gunicorn workers on one SQLite file: one task, each slot run once."""
    (tmp_path / "scheduling.py").write_text(recipe("gunicorn, every worker"))
    (tmp_path / "gunicorn_conf.py").write_text("from scheduling import post_fork, worker_exit\n")
    (tmp_path / "app.py").write_text(
        "def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'ok']\n"
    )
    db = tmp_path / "rota.db"
    env = {**os.environ, "ROTA_DB": str(db), "PYTHONPATH": str(tmp_path),
           "ROTA_PURGE_EVERY": "0.2"}  # fmt: skip
    gunicorn = pathlib.Path(sys.executable).parent / "gunicorn"
    server = subprocess.Popen(
        [str(gunicorn), "-w", "3", "-c", "gunicorn_conf.py", "--bind", "127.0.0.1:0", "app:app"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Until the workers made at least five runs (however loaded the machine): a
        # SIGTERM before gunicorn's arbiter installed its handlers would kill it.
        deadline = time.monotonic() + 120
        while _runs(db) < 5:
            assert server.poll() is None, "gunicorn exited"
            assert time.monotonic() < deadline, "no five runs in 120 s"
            time.sleep(0.1)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            assert server.wait(60) == 0
        finally:
            server.kill()
    store = SQLiteStore(db)
    try:
        assert [row.task_id for row in store.rows()] == ["purge-sessions"]  # one task, not three
        runs = store.outcomes("purge-sessions", 1000)
    finally:
        store.close()
    slots = [run.slot for run in runs]
    assert len(slots) >= 5
    assert len(slots) == len(set(slots))  # each slot once across the workers
    assert all(run.result == "ok" for run in runs)


def _runs(db: pathlib.Path) -> int:
    """How many runs the store at ``db`` recorded (0 before it exists)."""
    import sqlite3

    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as con:
            return int(con.execute("SELECT count(*) FROM rota_outcomes").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0


def test_celery_beat_schedule_ported() -> None:
    mod = module("recipe_celery", recipe("Celery"))
    scheduler = mod.scheduler
    assert {t.task_id for t in scheduler.tasks()} == {"add-every-30-seconds", "nightly-report"}
    nightly = scheduler.next_run_time("nightly-report")
    assert datetime.fromtimestamp(nightly, UTC).strftime("%H:%M:%S") == "03:00:00"
    assert mod.add(16, 16) == 32
