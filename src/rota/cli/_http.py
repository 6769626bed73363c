"""HTTP jobs: a job file's ``http = { url, method, headers, json, expect, timeout }``,
one request per run on httpx (extra ``rota[http]``), ``docs/operations.md``.

The stored request holds no secret: a header or URL given as ``{ env = "NAME" }``
is stored as that reference and read from the node's environment at each run, and
the values read are masked (``***``) in what the run records. Each request carries
``Idempotency-Key`` (the run's key: the same for every attempt of a slot, so a
server that honours it does the work once) and, when tracing is on, ``traceparent``.
A status outside ``expect``, a connection error or the timeout fails the run (and
is retried as any failure); the outcome keeps the status and the first
:data:`BODY` characters of the body.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rota import RunContext

from ._values import JobFileError, duration

HTTP = "rota.cli._http:run_http"
"""The stored action of ``http`` jobs: importable wherever rota is installed."""
BODY = 2000
"""Characters of a response's body an outcome keeps."""
HEADERS = 1000
"""Characters of a response's headers an outcome keeps (after its body)."""
UNSHOWN = frozenset({"set-cookie", "authorization", "proxy-authorization", "www-authenticate"})
"""Response headers never kept: they may carry a credential."""
KEYS = frozenset({"url", "method", "headers", "json", "body", "expect", "timeout"})
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


class HttpError(Exception):
    """An HTTP job's run failed: its status (``None``: no answer) and the body's start."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def request_spec(value: object, key: Callable[[str], str]) -> dict[str, Any]:
    """A job file's ``http`` table, validated, as the run takes it (JSON, no secret):
    ``{"url", "method", "headers", "json" | "body", "expect", "timeout"}``."""
    what = key("http")
    if not isinstance(value, dict) or "url" not in value or set(value) - KEYS:
        raise JobFileError(
            f'{what}: a table like {{ url = "https://...", method = "POST" }} is required '
            f"(keys: {', '.join(sorted(KEYS))})"
        )
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise JobFileError(
            f"{what}: HTTP jobs need the http extra: pip install 'rota[http]'"
        ) from None
    url = _reference(value["url"], f"{what}: url")
    if isinstance(url, str) and not url.startswith(("http://", "https://")):
        raise JobFileError(f"{what}: url: an http:// or https:// URL is required, got {url!r}")
    method = str(value.get("method", "GET")).upper()
    if method not in METHODS:
        raise JobFileError(
            f"{what}: method: {value.get('method')!r} is not one of {', '.join(METHODS)}"
        )
    headers = value.get("headers", {})
    if not isinstance(headers, dict):
        raise JobFileError(f"{what}: headers: a table of Name = value is required")
    spec: dict[str, Any] = {
        "url": url,
        "method": method,
        "headers": {str(n): _reference(v, f"{what}: headers.{n}") for n, v in headers.items()},
        "expect": _expect(value.get("expect", [200, 201, 202, 204]), f"{what}: expect"),
        "timeout": duration(value.get("timeout", 30), f"{what}: timeout"),
    }
    if "json" in value and "body" in value:
        raise JobFileError(f"{what}: give json or body, not both")
    if "json" in value:
        spec["json"] = value["json"]
    elif "body" in value:
        if not isinstance(value["body"], str):
            raise JobFileError(f"{what}: body: a string is required")
        spec["body"] = value["body"]
    return spec


def _reference(value: object, what: str) -> Any:
    """A string as is, or ``{ env = "NAME", prefix = "Bearer " }`` kept as a reference
    (its variable must be set where the file is loaded, as on every node)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "env" in value and set(value) <= {"env", "prefix"}:
        name, prefix = value["env"], value.get("prefix", "")
        if not isinstance(name, str) or not isinstance(prefix, str):
            raise JobFileError(f'{what}: {{ env = "NAME", prefix = "..." }} takes strings')
        if not os.environ.get(name):
            raise JobFileError(f"{what}: ${name} is not set")
        return {"env": name, "prefix": prefix}
    raise JobFileError(f'{what}: a string or {{ env = "NAME", prefix = "..." }} is required')


def _expect(value: object, what: str) -> list[int]:
    codes = value if isinstance(value, list) else [value]
    found = [
        c for c in codes if isinstance(c, int) and not isinstance(c, bool) and 100 <= c <= 599
    ]
    if not codes or len(found) != len(codes):
        raise JobFileError(f"{what}: a status code or a list of them is required, got {value!r}")
    return found


def _resolved(value: Any, secrets: list[str]) -> str:
    """A stored string, or a reference read from the environment now (its value added
    to ``secrets``, to be masked)."""
    if isinstance(value, str):
        return value
    found = os.environ.get(value["env"])
    if not found:
        raise HttpError(f"${value['env']} is not set on this node")
    secrets.append(found)
    return f"{value['prefix']}{found}"


def _masked(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def run_http(spec: dict[str, Any], *, run: RunContext) -> str:
    """One run of an HTTP job: the request ``spec`` describes, with ``Idempotency-Key``
    (and ``traceparent`` when tracing is on); ``"HTTP <status>"``, the body's first
    :data:`BODY` characters, then after a blank line the response's headers (up to
    :data:`HEADERS` characters, none of :data:`UNSHOWN`). Raises :class:`HttpError`
    (status, body, headers) for a status
    outside ``expect``, a connection error or the timeout. Redirects are followed and
    TLS certificates verified."""
    import httpx

    from rota import tracing

    secrets: list[str] = []
    url = _resolved(spec["url"], secrets)
    headers = {name: _resolved(value, secrets) for name, value in spec["headers"].items()}
    headers["Idempotency-Key"] = run.key
    tracing.inject(headers)
    content = spec.get("body")
    try:
        with httpx.Client(follow_redirects=True, timeout=spec["timeout"], verify=True) as client:
            answer = client.request(
                spec["method"], url, headers=headers, json=spec.get("json"),
                content=None if content is None else content.encode(),
            )  # fmt: skip
    except httpx.TimeoutException:
        raise HttpError(
            _masked(f"{spec['method']} {url}: no answer within {spec['timeout']:g}s", secrets)
        ) from None
    except httpx.HTTPError as exc:
        raise HttpError(_masked(f"{spec['method']} {url}: {exc}", secrets)) from None
    body = _masked(answer.text[:BODY], secrets)
    kept = "\n".join(
        f"{name}: {value}" for name, value in answer.headers.items() if name not in UNSHOWN
    )
    tail = (f"\n{body}" if body else "") + (
        f"\n\n{_masked(kept[:HEADERS], secrets)}" if kept else ""
    )
    status = f"HTTP {answer.status_code}"
    if answer.status_code not in spec["expect"]:
        expected = ", ".join(map(str, spec["expect"]))
        raise HttpError(f"{status} (expected {expected}){tail}", answer.status_code)
    return status + tail
