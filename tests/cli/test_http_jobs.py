"""HTTP jobs against a real server on 127.0.0.1: the request a run makes (its
``Idempotency-Key``, its headers with a secret from the environment, its JSON), a
status outside ``expect`` failing the run with the status and the body kept, the
timeout, and the secret in no output, log, store row or outcome."""

from __future__ import annotations

import http.server
import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import Cli

SECRET = "s3cr3t-token-xyz"


class Api:
    """A server that records each request and answers as ``answer`` says."""

    def __init__(self) -> None:
        seen: list[dict[str, Any]] = []
        self.seen = seen
        self.answer: tuple[int, str, float] = (202, '{"queued": true}', 0.0)
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                seen.append({"path": self.path, "headers": dict(self.headers),
                             "body": self.rfile.read(length).decode()})  # fmt: skip
                status, body, delay = api.answer
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Set-Cookie", "session=cookie-secret")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/refresh"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    yield server
    server.close()


def _job(cli: Cli, api: Api, extra: str = "") -> None:
    cli.env["API_TOKEN"] = SECRET
    cli.write(
        f'[[jobs]]\nid = "refresh"\nevery = "300ms"\n'
        f'http = {{ url = "{api.url}", method = "POST", '
        'headers = { Authorization = { env = "API_TOKEN", prefix = "Bearer " } }, '
        f'json = {{ full = false }}, expect = [200, 202, 204], timeout = "1s" }}\n{extra}'
    )


def test_each_run_posts_with_its_key_and_the_secret_from_the_environment(
    cli: Cli, api: Api
) -> None:
    _job(cli, api)
    proc = cli.start()
    cli.wait(lambda: len(api.seen) >= 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    first = api.seen[0]
    assert first["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert json.loads(first["body"]) == {"full": False}
    keys = [r["headers"]["Idempotency-Key"] for r in api.seen]
    assert len(set(keys)) == len(keys)
    assert all(k.startswith("refresh@") for k in keys)
    [latest] = cli.json("history", "refresh", "--limit", "1")
    assert latest["result"] == "ok"
    status, body, headers = latest["output"].split("\n", 2)
    assert (status, body) == ("HTTP 202", '{"queued": true}')
    assert "\ncontent-type: application/json" in headers  # the response's, after a blank line
    assert "cookie-secret" not in headers  # a credential the server sent is not kept
    stored = (cli.dir / "state.db").read_bytes()
    assert SECRET.encode() not in stored
    assert SECRET not in err
    assert SECRET not in cli("status").stdout


def test_a_status_outside_expect_fails_the_run_keeping_status_and_body(cli: Cli, api: Api) -> None:
    api.answer = (500, "boom " * 1000 + SECRET, 0.0)  # the secret echoed back: masked
    _job(cli, api, "max_retries = 1\n")
    proc = cli.start()
    cli.wait(lambda: cli.loaded() and _failed(cli))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    runs = cli.json("history", "refresh", "--limit", "50")
    failed = next(o for o in runs if o["result"] == "failed")
    assert failed["error"].startswith("HTTP 500 (expected 200, 202, 204)\nboom boom")
    assert "boom boom" in failed["error"]
    assert SECRET not in json.dumps(runs)
    assert any(o["result"] == "retry" for o in runs)  # retried as any failure
    keys = {r["headers"]["Idempotency-Key"] for r in api.seen[:2]}
    assert len(keys) == 1  # a retry of a slot sends the slot's key again


def test_the_timeout_fails_the_run(cli: Cli, api: Api) -> None:
    api.answer = (200, "late", 3.0)
    _job(cli, api)
    proc = cli.start()
    cli.wait(lambda: cli.loaded() and _failed(cli))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    failed = next(o for o in cli.json("history", "refresh") if o["result"] == "failed")
    assert "no answer within 1s" in failed["error"]


def _failed(cli: Cli) -> bool:
    return any(o["result"] == "failed" for o in cli.json("history", "refresh"))
