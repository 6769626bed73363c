"""Who may see and change what: the token of ``--token`` (everything) and named tokens
with a scope (``[access]`` in a job file, or ``$ROTA_TOKENS_FILE``, kept as SHA-256s
in the store), as ``docs/operations.md`` says.

Scopes grow: ``read`` (pages and ``GET`` API), ``operate`` (also pause, resume,
trigger, cancel), ``admin`` (everything, backfill included). A request beyond its
scope gets 403 and changes nothing; a token that matches none, 401. Without any
token configured the rules are today's (loopback only): ``POST``s are allowed, a
browser's with the page's CSRF token. Sessions and CSRF values are HMACs under a
key (the ``--token``, else a per-process secret): nothing to store.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

SESSION = "rota_session"
"""The session cookie a login sets."""
SCOPES = ("read", "operate", "admin")
"""Token scopes, each granting what the ones before it grant."""
FRESH = 5.0
"""Seconds the named tokens read from the store are used before they are read again."""


def sha256(token: str) -> str:
    """A token's digest as the store keeps it."""
    return hashlib.sha256(token.encode()).hexdigest()


class Access:
    """Who a request is, and whether its scope allows what it asks.

    ``token``: the token of ``--token`` (scope ``admin``, shown as ``token``);
    ``named``: reads the named tokens, ``[{"name", "scope", "sha256"}]`` (read at
    most every :data:`FRESH` seconds). Raises ``ValueError`` for an empty token.
    """

    def __init__(
        self, token: str | None, named: Callable[[], list[dict[str, Any]]] | None = None
    ) -> None:
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError("token must be a non-empty str or None")
        self.token = token
        self._named = named or list
        self._read: tuple[float, list[dict[str, Any]]] = (-FRESH, [])
        self._key = (token or secrets.token_hex(32)).encode()

    def tokens(self) -> list[dict[str, Any]]:
        """The named tokens (a failure to read them: none, as if none were set)."""
        at, found = self._read
        if time.monotonic() - at >= FRESH:
            try:
                found = [t for t in self._named() if t.get("scope") in SCOPES]
            except Exception:
                found = []
            self._read = (time.monotonic(), found)
        return found

    @property
    def guarded(self) -> bool:
        """Whether any token is configured (the controls then need one)."""
        return self.token is not None or bool(self.tokens())

    def identify(self, given: str) -> tuple[str, str] | None:
        """``(who, scope)`` of a token, or ``None`` if it is none of them (each compared
        in constant time)."""
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return "token", "admin"
        digest = sha256(given)
        for named in self.tokens():
            if hmac.compare_digest(digest, str(named.get("sha256", ""))):
                return str(named["name"]), str(named["scope"])
        return None

    def session_for(self, who: str, scope: str) -> str:
        """The session cookie's value for a login as ``who``."""
        return f"{who}|{scope}|{self._mac(f'session {who} {scope}')}"

    def session(self, request: Request) -> tuple[str, str] | None:
        """``(who, scope)`` of a request's valid session cookie, else ``None``."""
        value = request.cookies.get(SESSION, "")
        who, _, rest = value.partition("|")
        scope, _, mac = rest.partition("|")
        if not mac or not hmac.compare_digest(mac, self._mac(f"session {who} {scope}")):
            return None
        if who != "token" and not any(t["name"] == who for t in self.tokens()):
            return None  # a token removed since: its sessions end
        return who, scope

    def csrf(self, request: Request) -> str:
        """The CSRF token of the request's session (or of none)."""
        return self._mac(f"csrf {request.cookies.get(SESSION, '')}")

    def scope(self, request: Request) -> str | None:
        """What the page may offer: ``admin`` without any token; else the session's
        scope, or ``None`` when not logged in."""
        if not self.guarded:
            return "admin"
        found = self.session(request)
        return None if found is None else found[1]

    def refusal(self, request: Request, needs: str = "operate") -> tuple[int, str] | None:
        """Why a request that needs scope ``needs`` is refused (status and reason), or
        ``None`` with who sent it in ``request.state.who``. A ``read`` request without
        any token is allowed (reads stay open, as the pages are)."""
        if needs != "read" and _cross_origin(request):
            return 403, "a request from another origin cannot change anything"
        bearer = request.headers.get("authorization", "")
        given_csrf = request.headers.get("x-csrf-token", "")
        found: tuple[str, str] | None = None
        if bearer.startswith("Bearer "):
            found = self.identify(bearer[7:])
            if found is None:
                return 401, "the token is not one this dashboard knows"
        elif (session := self.session(request)) is not None and (
            needs == "read" or hmac.compare_digest(given_csrf, self.csrf(request))
        ):
            found = session
        elif needs == "read":
            request.state.who = "anonymous"
            return None
        elif self.guarded:
            return 401, "this needs a token: Authorization: Bearer TOKEN, or log in"
        else:
            browser = any(h in request.headers for h in ("origin", "sec-fetch-site", "cookie"))
            if browser and not hmac.compare_digest(given_csrf, self.csrf(request)):
                return 403, "a browser's request needs the page's CSRF token"
            request.state.who = "local"
            return None
        who, scope = found
        request.state.who = who
        if SCOPES.index(scope) < SCOPES.index(needs):
            return 403, f"the token {who!r} has scope {scope!r}; this needs {needs!r}"
        return None

    def _mac(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


def _cross_origin(request: Request) -> bool:
    """Whether a request says it comes from a page of another origin."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    if origin == "null":
        return True
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc != host
