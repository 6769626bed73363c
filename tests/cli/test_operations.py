"""Operating a fleet (``docs/operations.md``): the store's ledger on every store; alerts
that think in streaks, delivered once to a real webhook on 127.0.0.1 even when the
node is killed before it could deliver; retention by hand and by the node; tags; the
audit log of the command's actions."""

from __future__ import annotations

import http.server
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.cli import _alerts
from rota.cli._alerts import Fleet
from rota.cli._fleet import AlertRule, Destination
from rota.cli._jobfile import JobFile
from rota.durable import DurableScheduler
from rota.schedules import FixedRate
from rota.store import AlertRow, AuditRow, PostgresStore, SQLiteStore, Store
from rota.store._tags import TAGS_FROM_SPECS
from tests.cli.conftest import Cli
from tests.helpers import make_store, wait_until


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = make_store(request.param, request, tmp_path)
    made.open()
    yield made
    made.close()


def test_settings_swap_once_for_two_deciders(store: Store) -> None:
    ledger = store.ledger
    assert ledger.setting("x") is None
    assert ledger.swap("x", None, {"count": 1})
    assert not ledger.swap("x", None, {"count": 9})  # the other decider lost
    assert ledger.swap("x", {"count": 1}, {"count": 2})
    assert not ledger.swap("x", {"count": 1}, {"count": 3})
    assert ledger.setting("x") == {"count": 2}
    ledger.put_setting("x", None)
    assert ledger.setting("x") is None


def test_the_audit_log_is_newest_first_and_by_job(store: Store) -> None:
    ledger = store.ledger
    for i, job in enumerate(["a", "b", "a"]):
        ledger.audit(AuditRow(100.0 + i, f"who{i}", "pause", job, f"n{i}", i != 1))
    assert [r.who for r in ledger.audits(None, 10)] == ["who2", "who1", "who0"]
    assert [(r.note, r.applied) for r in ledger.audits("a", 10)] == [("n2", True), ("n0", True)]
    assert len(ledger.audits(None, 2)) == 2


def test_an_alert_is_put_once_and_taken_by_one_node_at_a_time(store: Store) -> None:
    ledger = store.ledger
    row = AlertRow("j", "failing", "j@1.0", {"job": "j"}, 10.0)
    assert ledger.alert(row)
    assert not ledger.alert(row._replace(body={"job": "other"}))  # decided again: no copy
    assert ledger.take(row, "a", until=20.0, now=10.0)
    assert not ledger.take(row, "b", until=21.0, now=11.0)  # a holds it
    assert ledger.take(row, "b", until=40.0, now=25.0)  # a's take ran out (a died)
    ledger.release(row, 27.0)  # b could not deliver it: anyone may try again from 27
    assert not ledger.take(row, "b", until=50.0, now=26.0)
    assert ledger.take(row, "a", until=50.0, now=28.0)
    ledger.sent(row, 29.0)
    assert ledger.alerts(True, 10) == []
    assert not ledger.take(row, "c", until=50.0, now=30.0)
    [kept] = ledger.alerts(False, 10)
    assert (kept.sent, kept.body) == (29.0, {"job": "j"})


def test_tags_are_an_index_a_bulk_action_reads_once(store: Store) -> None:
    """``Store.tagged``: the unfinished tasks with a tag, from the index the rows'
    writes keep; a change of tags moves them, a finished task leaves; the index of a
    store written before it (schema 7) is filled from the specs by its migration."""
    sched = DurableScheduler(store, clock=lambda: 1000.0)
    sched.register("noop", lambda at: None)
    for job, tags in (("a", ["etl", "finance"]), ("b", ["etl"]), ("c", None)):
        sched.ensure(job, FixedRate(60, start=1000.0), "noop", tags=tags)
    assert store.tagged("etl") == ["a", "b"]
    assert store.tagged("finance") == ["a"]
    assert store.tagged("nope") == []
    sched.ensure("b", FixedRate(60, start=1000.0), "noop", tags=["finance"])  # declared anew
    assert (store.tagged("etl"), store.tagged("finance")) == (["a"], ["a", "b"])
    sched.cancel("a")
    assert store.tagged("finance") == ["b"]
    if isinstance(store, SQLiteStore | PostgresStore):
        dialect, p = ("sqlite", "rota_") if isinstance(store, SQLiteStore) else (
            "postgres", store._p)  # fmt: skip
        _sql(store, f"DELETE FROM {p}tags")
        assert store.tagged("finance") == []
        _sql(store, TAGS_FROM_SPECS[dialect].format(p=p))  # schema 8's step, on 7's rows
        assert store.tagged("finance") == ["b"]


def _sql(store: Store, statement: str) -> None:
    if isinstance(store, SQLiteStore):
        with store._write() as db:
            db.execute(statement)
    else:
        assert isinstance(store, PostgresStore)
        store._retrying(lambda db: db.execute(statement))


def test_prune_keeps_the_newest_runs_of_each_job_and_the_recent_audit(store: Store) -> None:
    sched = DurableScheduler(store, clock=lambda: 1000.0)
    for job in ("a", "b"):
        sched.register(job, lambda at: None)
        sched.schedule(job, FixedRate(1, start=1000.0), job)
    for now in range(1000, 1010):
        sched.tick(float(now))
    assert len(sched.history("a", 100)) == 10
    store.ledger.audit(AuditRow(5.0, "old", "pause", "a", None, True))
    store.ledger.audit(AuditRow(2000.0, "new", "pause", "a", None, True))
    gone = sched.prune(100.0, batch=3, keep_runs=4)  # batches of 3: several transactions
    assert gone == 12 + 1  # 6 runs of each job, the old audit entry
    assert [o.slot for o in sched.history("a", 100)] == [1009, 1008, 1007, 1006]
    assert len(sched.history("b", 100)) == 4
    assert [r.who for r in store.ledger.audits(None, 10)] == ["new"]
    assert sched.prune(None, keep_runs=4) == 0


# -- a real webhook, and real nodes ---------------------------------------------------


class Hook:
    """An HTTP server on 127.0.0.1 that records the JSON bodies POSTed to it."""

    def __init__(self, port: int = 0) -> None:
        bodies: list[dict[str, Any]] = []
        self.bodies = bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["content-length"])
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[str]:
        return [b["event"] for b in self.bodies]


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    yield server
    server.close()


def _alerting(cli: Cli, port: int, rule: str, extra: str = "") -> None:
    flag = cli.dir / "healthy"
    cli.write(
        f'[alerts]\nops = {{ webhook = "http://127.0.0.1:{port}/hook" }}\n{extra}'
        f'[[jobs]]\nid = "sync"\nevery = "200ms"\ncommand = "test -f {flag}"\n'
        f'tags = ["etl"]\nalert = {{ to = ["ops"], {rule} }}\n'
        '[[jobs]]\nid = "other"\nevery = "1h"\ncommand = "true"\ntags = ["etl", "finance"]\n'
    )


def test_one_alert_after_n_failures_in_a_row_one_on_recovery_and_a_pause(
    cli: Cli, hook: Hook
) -> None:
    _alerting(cli, hook.port, "after = 3, recovered = true, pause_after = 6")
    proc = cli.start()
    cli.wait(lambda: "paused" in hook.events(), timeout=30)
    assert hook.events() == ["failing", "paused"]  # not one per failure
    failing, paused = hook.bodies
    assert (failing["job"], failing["streak"], failing["error"]) == (
        "sync", 3, "exit status 1 (no output)")  # fmt: skip
    assert failing["key"] == f"sync@{failing['slot']!r}"
    assert set(failing) == {"job", "event", "streak", "slot", "key", "error", "node", "url"}
    assert paused["streak"] == 6
    assert cli.json("status")[1]["paused"] is True  # (other, sync)
    [entry] = cli.json("audit", "--job", "sync")
    assert (entry["who"], entry["action"], entry["applied"]) == ("rota:alert", "pause", True)
    assert "6 failures in a row" in entry["note"]
    (cli.dir / "healthy").touch()
    assert cli("resume", "sync", "--note", "disk cleaned").returncode == 0
    cli.wait(lambda: "recovered" in hook.events(), timeout=30)
    assert hook.bodies[-1]["streak"] >= 6
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    proc = cli.start()  # a restart decides again from the store: nothing sent twice
    cli.wait(lambda: cli.json("status")[1]["last"] == "ok")
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert hook.events() == ["failing", "paused", "recovered"]
    audit = cli.json("audit")
    assert [(a["who"].split(":")[0], a["action"], a["note"]) for a in audit[:2]] == [
        ("cli", "resume", "disk cleaned"), ("rota", "pause", entry["note"])]  # fmt: skip


def test_an_alert_its_node_died_before_delivering_arrives_once(cli: Cli) -> None:
    """kill -9 between the N-th failure's commit and the delivery (the webhook is down,
    so the node cannot have delivered it): a restarted node delivers it, once."""
    probe = Hook()
    port = probe.port
    probe.close()  # nothing listens there now: connection refused
    _alerting(cli, port, "after = 2")
    log = cli.dir / "node.log"
    proc = cli.start(log=log)
    cli.wait(lambda: "not delivered" in log.read_text(), timeout=30)
    cli.wait(lambda: _retry_after(cli) is not None)  # the round ended: tried again later
    proc.kill()
    proc.wait(30)
    late = Hook(port)
    try:
        proc = cli.start()
        cli.wait(lambda: late.events() == ["failing"], timeout=30)
        time.sleep(2.5)  # more rounds: nothing more arrives
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert late.events() == ["failing"]
        assert late.bodies[0]["streak"] == 2
    finally:
        late.close()


def _retry_after(cli: Cli) -> float | None:
    """When the alert waiting in the store may be tried again, if its last round
    failed (its take shortened to the retry's pause); else ``None``."""
    with sqlite3.connect(cli.dir / "state.db") as db:
        found = db.execute("SELECT taken_until FROM rota_alerts WHERE sent IS NULL").fetchall()
    return (
        found[0][0]
        if found and found[0][0] is not None and found[0][0] < time.time() + 5
        else None
    )


def test_tags_act_on_every_job_with_the_tag_and_filter_status(cli: Cli, hook: Hook) -> None:
    _alerting(cli, hook.port, "after = 1000")
    proc = cli.start()
    cli.wait(lambda: cli.loaded() and len(cli.json("status")) == 2)
    assert [e["tags"] for e in cli.json("status")] == [["etl", "finance"], ["etl"]]
    assert [e["id"] for e in cli.json("status", "--tag", "finance")] == ["other"]
    done = cli("pause", "--tag", "etl", "--note", "warehouse upgrade")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pause: other", "pause: sync"]
    assert all(e["paused"] for e in cli.json("status"))
    again = cli("pause", "--tag", "etl")
    assert again.returncode == 1
    assert "pause: other: not applied: it is paused already" in again.stdout
    assert cli("resume", "--tag", "nope").returncode == 1
    assert cli("resume").returncode == 2  # neither an id nor a tag
    audit = cli.json("audit")
    assert [(a["action"], a["job"], a["applied"]) for a in audit] == [
        ("pause", "sync", False), ("pause", "other", False),
        ("pause", "sync", True), ("pause", "other", True),
    ]  # fmt: skip
    assert audit[-1]["note"] == "warehouse upgrade"
    assert audit[-1]["who"].startswith("cli:")
    text = cli("audit").stdout
    assert "warehouse upgrade" in text
    assert "(not applied)" in text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_retention_by_hand_and_stated_in_status(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "fast"\nevery = "100ms"\ncommand = "true"\n')
    proc = cli.start()
    cli.wait(lambda: cli.loaded() and len(cli.json("history", "fast", "--limit", "30")) >= 25)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert cli("status").stdout.splitlines()[-1] == "retention: no rule set: keep everything"
    assert "everything is kept" in cli("prune").stderr
    done = cli("prune", "--keep-runs", "5", "--batch", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pruned ")
    assert len(cli.json("history", "fast", "--limit", "100")) == 5
    cli.write('[retention]\nkeep = "30d"\nkeep_runs = 3\n'
              '[[jobs]]\nid = "fast"\nevery = "1h"\ncommand = "true"\n')  # fmt: skip
    proc = cli.start()  # a node prunes by the rule at once, then every few minutes
    cli.wait(lambda: len(cli.json("history", "fast", "--limit", "100")) == 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    footer = cli("status").stdout.splitlines()[-1]
    assert footer == "retention: outcomes kept 30d, at most 3 runs per job"
    assert cli("prune").stdout.startswith("pruned 0 rows (outcomes kept 30d, at most 3 runs")


def _plan(cli: Cli) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rota", "plan", str(cli.jobs)], cwd=cli.dir, env=cli.env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[retention]\nkeep_runs = 0\n", "keep_runs': 0 is not an int >= 1"),
        ('[retention]\nkeep = "soon"\n', "[retention]: key 'keep'"),
        ('[alerts]\nops = { webhook = "ftp://x" }\n', "an http:// or https:// URL"),
        ('[alerts]\nops = { webhook = { env = "ROTA_NO_VAR" } }\n', "$ROTA_NO_VAR is not set"),
        ('[access]\nci = { scope = "root", sha256 = "' + "a" * 64 + '" }\n', "'root' is not"),
        ("[pools]\nwarehouse = 0\n", "[pools]: key 'warehouse': Pool size must be at least 1"),
        ('[pools]\nwarehouse = "2"\n', "Pool size must be an int, not '2'"),
    ],
)
def test_bad_fleet_tables_are_refused_naming_the_key(cli: Cli, text: str, message: str) -> None:
    cli.write(text + '[[jobs]]\nid = "j"\nevery = "1h"\ncommand = "true"\n')
    done = _plan(cli)
    assert done.returncode == 2
    assert message in done.stderr


def test_a_job_alert_naming_an_unknown_destination_is_refused(cli: Cli) -> None:
    cli.write('[[jobs]]\nid = "j"\nevery = "1h"\ncommand = "true"\nalert = { to = ["ops"] }\n')
    done = _plan(cli)
    assert done.returncode == 2
    assert "job 'j': key 'alert': to: no destination 'ops' in [alerts]" in done.stderr


def test_a_job_naming_an_unknown_pool_is_refused(cli: Cli) -> None:
    cli.write('[pools]\nwh = 2\n[[jobs]]\nid = "j"\nevery = "1h"\ncommand = "true"\npool = "w"\n')
    done = _plan(cli)
    assert done.returncode == 2
    assert "job 'j': key 'pool': 'w' is not a pool of [pools] (declared: wh)" in done.stderr


def test_a_run_running_longer_than_its_rule_alerts_once(cli: Cli, hook: Hook) -> None:
    cli.write(
        f'[alerts]\nops = {{ webhook = "http://127.0.0.1:{hook.port}/hook" }}\n'
        '[[jobs]]\nid = "slow"\nevery = "1h"\nstart = "2020-01-01T00:00:00+00:00"\n'
        'misfire = "coalesce"\ncommand = "sleep 4"\n'
        'alert = { to = ["ops"], running_longer = "1s" }\n'
    )
    proc = cli.start()
    cli.wait(lambda: "running_long" in hook.events(), timeout=30)
    time.sleep(2)  # the node looks every few seconds: no second alert for the run
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    [body] = hook.bodies
    assert (body["job"], body["event"]) == ("slow", "running_long")
    assert body["key"] == f"slow@{body['slot']!r}"


def test_a_command_destination_gets_the_alert_as_variables(cli: Cli) -> None:
    out = cli.dir / "paged"
    flag = cli.dir / "healthy"
    cli.write(
        f'[alerts]\npage = {{ command = ["sh", "-c", "echo $ROTA_ALERT_EVENT $ROTA_ALERT_JOB '
        f'$ROTA_ALERT_STREAK >> {out}"] }}\n'
        f'[[jobs]]\nid = "sync"\nevery = "200ms"\ncommand = "test -f {flag}"\n'
        'alert = { to = ["page"], after = 2 }\n'
    )
    proc = cli.start()
    cli.wait(lambda: out.exists() and out.read_text() != "", timeout=30)
    time.sleep(1)  # more failures: the streak alerted once
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert out.read_text() == "failing sync 2\n"


class _Job:
    """What :meth:`Fleet.update` reads of a job: its id and alert rule."""

    def __init__(self, job_id: str, alert: AlertRule) -> None:
        self.id, self.alert = job_id, alert


def test_a_job_no_node_runs_alerts_overdue_once(
    tmp_path: Path, hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose run is past ``rota check``'s grace, with no node running it (this
    fleet's node never ticks): one ``overdue`` alert, however many looks."""
    monkeypatch.setattr(_alerts, "LOOK", 0.1)
    sched = DurableScheduler(SQLiteStore(tmp_path / "s.db"))
    sched.register("noop", lambda at: None)
    sched.schedule("late", FixedRate(60, start=time.time() - 3600), "noop")
    fleet = Fleet(sched)
    ops = Destination("ops", webhook=f"http://127.0.0.1:{hook.port}/hook")
    rule = AlertRule(("ops",))
    jobs: list[Any] = [_Job("late", rule)]
    try:
        fleet.update(JobFile(jobs, None, {"ops": ops}, []))
        wait_until(lambda: hook.events() == ["overdue"], 30)
        time.sleep(0.5)  # several more looks: the same episode, nothing more
        assert hook.events() == ["overdue"]
        [body] = hook.bodies
        assert (body["job"], body["event"]) == ("late", "overdue")
        assert body["key"] == f"late@{body['slot']!r}"
    finally:
        fleet.close()
