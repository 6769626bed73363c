"""The dashboard, the HTTP API and ``/metrics``: one Starlette app over a
:class:`~rota.observe.Source`.

Pages are Jinja2 templates (autoescaped: a job id, an error or a command's
output is text, never markup); live parts are fragments the page fetches
again every second with htmx (vendored in ``static/``, no CDN). Controls are
``POST``s that go through :meth:`Source.control`, so the scheduler decides
each rule once, and are allowed by :class:`Access`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from markupsafe import Markup, escape
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rota import Upcoming
from rota._core.types import error_shown
from rota.metrics import Collector
from rota.observe import OPERATIONS, Source, status_json
from rota.report import (
    audit_entry,
    day_shown,
    described,
    first_line,
    history_entry,
    job_zone,
    lateness,
    local_zone,
    overdue,
    printable,
    ran_at,
    relative,
    time_shown,
    waiting_shown,
)
from rota.store import redacted

from ._access import SESSION, Access, _cross_origin

log = logging.getLogger("rota.web")

HERE = Path(__file__).resolve().parent

"""The cookie a login sets (HttpOnly, SameSite=Strict)."""

HISTORY = 50
"""Runs a job page shows (and charts)."""

HEADERS = {
    # Only the dashboard's own scripts and styles run: an id or output that slipped
    # past escaping still could not execute. No framing (clickjacking).
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
"""Headers of every page."""

SPARK = 20
"""Runs a job's sparkline on the list shows."""

RESULTS = frozenset({"ok", "retry", "failed", "cancelled"})
"""The results a store records (any other text is escaped before it is drawn)."""

FAILURE_ROWS = 50
"""Failing jobs the failures page shows a page."""
PAGE_ROWS = 100
"""Jobs the list shows on one page (a link gives the next)."""

NOTED = 500
"""Latest control actions read for the pause notes the pages show."""
AUDIT_ROWS = 200
"""Control actions the audit page shows."""
FRESH = 0.5
"""Seconds a rendered live part is served again to other pages asking for it: open
pages poll every second, and N of them then cost the node at most two renders a
second, not N; an outcome still shows within a poll plus this (1.5 s < the 2 s
bound)."""


class JobRow(NamedTuple):
    """One job as the pages show it. Attributes, not a dict: a template's ``r.id`` is
    then one lookup (on a dict, Jinja tries the attribute first and fails), which
    halved the jobs list's render, measured."""

    id: str
    status: str
    paused: bool
    next: str
    next_rel: str
    late: str | None
    last: str | None
    last_time: str
    last_rel: str
    error: str
    schedule: str
    unreadable: str | None
    spark: Markup


class Dashboard:
    """The app's handlers over one source: pages, API, ``/metrics`` and ``/healthz``.

    ``node``: the collector of a process that runs jobs (its run counters);
    without one, ``/metrics`` has the store's state only. Raises
    ``ValueError`` for an empty token.
    """

    def __init__(
        self,
        source: Source,
        *,
        token: str | None = None,
        node: Collector | None = None,
        tokens: list[dict[str, str]] | None = None,
    ) -> None:
        self.source = source
        given = list(tokens or [])
        self.access = Access(token, lambda: given + (source.ledger.setting("access") or []))
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(quote=lambda s: quote(str(s), safe=""),
                                          printable=printable)  # fmt: skip
        collector = node if node is not None else Collector(source, runs=False)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._rendered: dict[tuple[str, str, str], tuple[float, Response]] = {}

    def _shared(self, handler: Callable[[Request], Awaitable[Response]]) -> Any:
        """``handler`` whose live part (``?fragment=1``), once rendered, is served again
        for :data:`FRESH` s to every page asking for the same one (the same path, query
        and access): a node's cost is one render per poll period, whatever the number
        of open pages. A control clears them all."""

        async def shared(request: Request) -> Response:
            if request.query_params.get("fragment") != "1":
                return await handler(request)
            key = (request.url.path, request.url.query, request.cookies.get(SESSION, ""))
            now = time.monotonic()
            cached = self._rendered.get(key)
            if cached is not None and now - cached[0] < FRESH:
                return cached[1]
            response = await handler(request)
            if len(self._rendered) > 1000:  # many distinct queries: start again
                self._rendered.clear()
            self._rendered[key] = (now, response)
            return response

        return shared

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        fragment = request.query_params.get("fragment") == "1"
        if fragment:  # the live part alone, which the page fetches again every second
            name = context.get("live") or name.replace(".html", "_live.html")
        context = {
            "base": request.scope.get("root_path", "").rstrip("/"),
            "title": self.source.name,
            "csrf": self.access.csrf(request),
            "can_act": self.access.scope(request) in ("operate", "admin"),
            "needs_login": self.access.guarded,
            "logged_in": self.access.session(request) is not None,
            "fragment": fragment,
            "notes": self.notes(),
            **context,
        }
        return self.templates.TemplateResponse(
            request, name, context, status_code=status, headers=HEADERS
        )

    def rows(self, entries: list[Any], *, sparks: bool = False) -> list[JobRow]:
        """The jobs as the list shows them; with ``sparks``, each with the sparkline of
        its last :data:`SPARK` runs (one :meth:`Source.recent` read for them all)."""
        now = time.time()
        here = local_zone()  # once, not per job: it asks the OS
        shown = []
        recent = (
            self.source.recent([str(e.info.task_id) for e in entries], SPARK) if sparks else {}
        )
        for entry in entries:
            info, last = entry.info, entry.last
            tz = here if entry.zone is None else job_zone(entry.zone)
            shown.append(JobRow(
                id=str(info.task_id),
                status=str(info.status),
                paused=info.paused,
                next=time_shown(info.next_run_time, tz),
                next_rel=relative(info.next_run_time, now),
                late=lateness(info, now),
                last=last.result if last else None,
                last_time=time_shown(ran_at(last), tz) if last else "-",
                last_rel=relative(ran_at(last), now) if last else "-",
                error=first_line(error_shown(last.error)) if last else "",
                schedule=described(info.schedule, tz),
                unreadable=entry.unreadable,
                spark=_spark(recent.get(str(info.task_id), [])),
            ))  # fmt: skip
        return shown

    async def jobs_page(self, request: Request) -> Response:
        """Every job, or those a filter (failed, paused, overdue) or a search of ids
        keeps: sorted by a column (``?sort=job|status|next|last``, ``&desc=1``),
        :data:`PAGE_ROWS` a page (``?page=N``), under a summary of them all. One
        listing read, O(n log n) per render (shared by the pages polling it)."""
        query = request.query_params
        wanted, search = query.get("filter", ""), query.get("q", "").strip().lower()
        tag = query.get("tag", "")
        sort = query.get("sort", "job") if query.get("sort") in SORTS else "job"
        desc = query.get("desc") == "1"
        now = time.time()
        everything = self.source.entries()
        entries = [
            e for e in everything
            if _kept(e, wanted, now) and search in str(e.info.task_id).lower()
            and (not tag or tag in e.tags)
        ]  # fmt: skip
        entries.sort(key=lambda e: SORTS[sort](e, now), reverse=desc)
        pages = max(1, -(-len(entries) // PAGE_ROWS))
        try:
            number = min(max(1, int(query.get("page", "1"))), pages)
        except ValueError:
            number = 1
        shown = entries[(number - 1) * PAGE_ROWS : number * PAGE_ROWS]
        return self.page(request, "jobs.html", {
            "rows": self.rows(shown, sparks=True), "total": len(entries),
            "summary": _summary(everything, now), "filter": wanted, "q": search, "tag": tag,
            "tags": sorted({t for e in everything for t in e.tags}),
            "sort": sort, "desc": desc, "page": number, "pages": _page_numbers(number, pages),
            "last_page": pages,
        })  # fmt: skip

    async def job_page(self, request: Request) -> Response:
        """``GET /jobs/{id}``: one job (404 if unknown). Three reads and one history read."""
        job_id = request.path_params["job_id"]
        entry = self.source.entry(job_id)
        if entry is None:
            return self.page(request, "missing.html", {"job_id": job_id}, status=404)
        tz = job_zone(entry.zone)
        runs = self.source.history(job_id, HISTORY)
        history = [
            {
                "at": time_shown(o.at, tz),
                "result": o.result,
                "attempt": o.attempt,
                "started": time_shown(o.started, tz),
                "took": None if o.started is None else max(0.0, o.finished - o.started),
                "lag": None if o.started is None else o.started - o.at,
                "error": error_shown(o.error),
                "output": o.value,
                "owner": o.owner,
            }
            for o in runs
        ]
        ups, downs = self.source.neighbours(job_id)
        return self.page(request, "job.html", {
            "job": self.rows([entry])[0],
            "zone": str(tz),
            "tags": entry.tags,
            "upstream": ups, "downstream": downs,
            "waiting": entry.info.waiting_for and waiting_shown(entry.info.waiting_for, tz),
            "upcoming": [_upcoming(u, tz) for u in self.source.upcoming(job_id, UPCOMING)],
            "history": history,
            "chart": _chart(list(reversed(history))),
        })  # fmt: skip

    async def failures_page(self, request: Request) -> Response:
        """``GET /failures``: each job whose latest run failed or is retried, newest
        first, once, with how many of its last :data:`SPARK` runs failed (repeats
        grouped, not a box each); :data:`FAILURE_ROWS` a page (``?page=N``). One
        listing and one read of the recent runs of the page's jobs."""
        failed = [
            e for e in self.source.entries() if e.last and e.last.result in ("failed", "retry")
        ]
        failed.sort(key=lambda e: e.last.finished if e.last else 0, reverse=True)
        pages = max(1, -(-len(failed) // FAILURE_ROWS))
        try:
            number = min(max(1, int(request.query_params.get("page", "1"))), pages)
        except ValueError:
            number = 1
        failed = failed[(number - 1) * FAILURE_ROWS : number * FAILURE_ROWS]
        recent = self.source.recent([str(e.info.task_id) for e in failed], SPARK)
        shown = []
        for e in failed:
            assert e.last is not None
            runs = recent.get(str(e.info.task_id), [])
            shown.append({
                "id": str(e.info.task_id), "result": e.last.result,
                "time": time_shown(ran_at(e.last), job_zone(e.zone)),
                "ago": relative(ran_at(e.last), time.time()),
                "error": error_shown(e.last.error) or "",
                "failures": sum(o.result in ("failed", "retry") for o in runs), "runs": len(runs),
            })  # fmt: skip
        return self.page(request, "live.html", {
            "rows": shown, "heading": "Failures", "live": "failures_live.html",
            "page": number, "pages": _page_numbers(number, pages), "last_page": pages,
        })  # fmt: skip

    async def nodes_page(self, request: Request) -> Response:
        """``GET /nodes``: every node its heartbeats recorded, live or dead (no beat for
        longer than its lease), with its last heartbeat and the runs it holds now; a
        node holding runs that recorded no heartbeat yet is listed too; above them, each
        pool's places in use across the nodes. Three reads."""
        now = self.source.now()
        held: dict[str, list[dict[str, Any]]] = {}
        for lease in self.source.leases():
            tz = job_zone(lease.zone)
            held.setdefault(lease.node, []).append({
                "id": lease.task_id, "due": time_shown(lease.due, tz),
                "until": time_shown(lease.until, tz), "takeovers": lease.takeovers,
            })  # fmt: skip
        here = local_zone()
        nodes = [
            {"name": redacted(n.node), "live": now - n.seen <= n.lease,
             "seen": relative(n.seen, now), "seen_at": time_shown(n.seen, here),
             "since": time_shown(n.started, here), "runs": held.pop(n.node, [])}
            for n in self.source.nodes()
        ]  # fmt: skip
        nodes += [
            {"name": redacted(node), "live": True, "seen": "-", "seen_at": "-", "since": "-",
             "runs": runs}
            for node, runs in sorted(held.items())
        ]  # fmt: skip
        nodes.sort(key=lambda n: (not n["live"], n["name"]))
        pools = [{"name": name, "size": size, "used": used}
                 for name, (size, used) in self.source.pools().items()]  # fmt: skip
        return self.page(request, "live.html", {
            "nodes": nodes, "durable": self.source.durable, "heading": "Nodes",
            "live": "nodes_live.html", "pools": pools,
        })  # fmt: skip

    async def login_page(self, request: Request) -> Response:
        """``GET /login``: the form that grants the controls (a redirect without a token)."""
        if not self.access.guarded:
            return RedirectResponse(_base(request) + "/", 303)
        return self.page(request, "login.html", {"wrong": False, "next": _next(request)})

    async def login(self, request: Request) -> Response:
        """``POST /login``: the token checked in constant time; the session cookie set."""
        if not self.access.guarded:
            return RedirectResponse(_base(request) + "/", 303)
        if _cross_origin(request):
            return JSONResponse({"error": "a login from another origin is refused"}, 403)
        form = await request.form()
        found = self.access.identify(str(form.get("token", "")))
        target = _next(request, str(form.get("next", "")))
        if found is None:
            log.warning("a login with a wrong token (from %s)", _client(request))
            return self.page(request, "login.html", {"wrong": True, "next": target}, status=401)
        response = RedirectResponse(target, 303)
        response.set_cookie(SESSION, self.access.session_for(*found), httponly=True,
                            samesite="strict", path=_base(request) + "/")  # fmt: skip
        log.info("login as %s (from %s)", found[0], _client(request))
        return response

    async def logout(self, request: Request) -> Response:
        """``POST /logout``: the session cookie cleared."""
        response = RedirectResponse(_base(request) + "/", 303)
        response.delete_cookie(SESSION, path=_base(request) + "/")
        return response

    async def api_jobs(self, request: Request) -> Response:
        """``GET /api/jobs``: the array of ``rota status --json`` (``?tag=T``: the jobs
        with that tag). One listing."""
        tag = request.query_params.get("tag")
        return JSONResponse(
            [status_json(e) for e in self.source.entries() if tag is None or tag in e.tags]
        )

    async def api_job(self, request: Request) -> Response:
        """``GET /api/jobs/{id}``: one of those objects; 404 if unknown."""
        entry = self.source.entry(request.path_params["job_id"])
        if entry is None:
            return _unknown(request.path_params["job_id"])
        return JSONResponse(status_json(entry))

    async def api_history(self, request: Request) -> Response:
        """``GET /api/jobs/{id}/history?limit=N``: ``rota history --json``; 404, 400."""
        job_id = request.path_params["job_id"]
        raw = request.query_params.get("limit", "20")
        limit = _limit(raw)
        if limit is None:
            return JSONResponse({"error": f"limit must be an integer >= 1, got {raw!r}"}, 400)
        if self.source.entry(job_id) is None:
            return _unknown(job_id)
        return JSONResponse([history_entry(o) for o in self.source.history(job_id, limit)])

    async def api_control(self, request: Request) -> Response:
        """``POST /api/jobs/{id}/{operation}``: 200 with the job, 404, 409, or 401/403
        as :class:`Access` says; one log line. One transaction."""
        job_id, operation = request.path_params["job_id"], request.path_params["operation"]
        if operation == "backfill":
            return await self.api_backfill(request, job_id)
        if operation not in OPERATIONS:
            return JSONResponse({"error": f"no operation {operation!r}"}, 404)
        refused = self.access.refusal(request)
        if refused is not None:
            log.warning("%s %r refused (%s, from %s)", operation, job_id, refused[1],
                        _client(request))  # fmt: skip
            if refused[0] == 403 and hasattr(request.state, "who"):  # a known token's
                self.source.audit(request.state.who, operation, job_id, refused[1], False)
            return JSONResponse({"error": refused[1]}, refused[0])
        note = await _note(request)
        applied = self.source.control(operation, job_id)
        self._rendered.clear()  # the next poll shows the change
        who = f"{request.state.who} from {_client(request)}"
        if applied is None:
            return _unknown(job_id)
        self.source.audit(request.state.who, operation, job_id, note or None, applied)
        log.info(
            "%s: %s %r%s%s", who, operation, job_id,
            f" (note: {note})" if note else "", "" if applied else ": did not apply",
            extra={"who": who, "action": operation, "job": job_id, "note": note,
                   "applied": applied},
        )  # fmt: skip
        entry = self.source.entry(job_id)
        body = status_json(entry) if entry is not None else {"id": job_id}
        if not applied:
            return JSONResponse({**body, "error": f"{operation} does not apply now"}, 409)
        return JSONResponse(body)

    async def api_backfill(self, request: Request, job_id: str) -> Response:
        """``POST /api/jobs/{id}/backfill`` with ``{"from": T, "until": T, "note": ...}``
        (``T``: epoch seconds or ISO 8601 with an offset; ``until`` defaults to now):
        ``rota backfill``; scope ``admin``. 200 with ``{"queued": N}``, 400, 404."""
        refused = self.access.refusal(request, "admin")
        if refused is not None:
            if refused[0] == 403 and hasattr(request.state, "who"):
                self.source.audit(request.state.who, "backfill", job_id, refused[1], False)
            return JSONResponse({"error": refused[1]}, refused[0])
        try:
            body = json.loads(await request.body() or b"{}")
            start = _instant(body["from"])
            until = _instant(body.get("until", time.time()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": f'a body {{"from": T, "until": T}} is required: {exc}'},
                                400)  # fmt: skip
        task_id = self.source.table.find(job_id)
        if task_id is None:
            return _unknown(job_id)
        try:
            queued = self.source.scheduler.backfill(task_id, start, until)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        window = f"{start!r} .. {until!r}" + (f": {body['note']}" if body.get("note") else "")
        self.source.audit(request.state.who, "backfill", job_id, window, queued > 0)
        self._rendered.clear()
        return JSONResponse({"id": job_id, "queued": queued})

    def notes(self) -> dict[str, dict[str, Any]]:
        """Each paused job's pause note, from the audit log (a pause from the command,
        the API or an alert rule alike): who, when, why. One read of the latest
        :data:`NOTED` actions."""
        found: dict[str, dict[str, Any]] = {}
        for row in self.source.audit_log(None, NOTED):
            if row.job is None or row.job in found or not row.applied:
                continue
            if row.action in ("resume", "cancel"):
                found[row.job] = {}
            elif row.action == "pause":
                found[row.job] = {"note": row.note, "who": row.who,
                                  "at": time_shown(row.at, local_zone())}  # fmt: skip
        return {job: note for job, note in found.items() if note}

    async def api_audit(self, request: Request) -> Response:
        """``GET /api/audit?job=ID&limit=N``: the latest control actions, newest first
        (``rota audit --json``); 400 for a bad limit."""
        refused = self.access.refusal(request, "read")
        if refused is not None:
            return JSONResponse({"error": refused[1]}, refused[0])
        limit = _limit(request.query_params.get("limit", "100"))
        if limit is None:
            return JSONResponse({"error": "limit must be an integer >= 1"}, 400)
        job = request.query_params.get("job") or None
        return JSONResponse([audit_entry(r) for r in self.source.audit_log(job, limit)])

    async def audit_page(self, request: Request) -> Response:
        """``GET /audit``: who did what, newest first (``?job=ID``: one job's)."""
        job = request.query_params.get("job") or None
        rows = [
            {**audit_entry(r), "time": time_shown(r.at, local_zone())}
            for r in self.source.audit_log(job, AUDIT_ROWS)
        ]
        return self.page(request, "audit.html", {"rows": rows, "job": job or "",
                                                 "heading": "Audit log"})  # fmt: skip

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus text 0.0.4 (see :class:`rota.metrics.Collector`)."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: 200 while the store answers, else 503 with the reason."""
        problem = self.source.check()
        if problem is None:
            return JSONResponse({"ok": True})
        return JSONResponse({"ok": False, "reason": problem}, 503)

    def app(self) -> Starlette:
        """The Starlette app serving these handlers."""
        routes = [
            Route("/", self._shared(self.jobs_page)),
            Route("/jobs/{job_id:path}", self._shared(self.job_page)),
            Route("/failures", self._shared(self.failures_page)),
            Route("/nodes", self._shared(self.nodes_page)),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/audit", self._shared(self.audit_page)),
            Route("/api/audit", self.api_audit),
            Route("/api/jobs", self.api_jobs),
            Route("/api/jobs/{job_id:path}/history", self.api_history),
            Route("/api/jobs/{job_id:path}/{operation}", self.api_control, methods=["POST"]),
            Route("/api/jobs/{job_id:path}", self.api_job),
            Route("/metrics", self.metrics),
            Route("/healthz", self.healthz),
            Route("/favicon.ico", _favicon),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        return Starlette(routes=routes)


def _unknown(job_id: str) -> Response:
    return JSONResponse({"error": f"no job {job_id!r}"}, 404)


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _next(request: Request, given: str | None = None) -> str:
    """Where a login goes next: a path of this app, never another site."""
    target = given if given is not None else request.query_params.get("next", "")
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return _base(request) + "/"
    return target


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


async def _note(request: Request) -> str:
    """The optional note of a control (a form field or a JSON ``note``), one line."""
    note: object = ""
    kind = request.headers.get("content-type", "")
    try:
        if kind.startswith("application/json"):
            body = json.loads(await request.body() or b"{}")
            note = body.get("note", "") if isinstance(body, dict) else ""
        elif kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
            note = (await request.form()).get("note", "")
    except ValueError:
        note = ""
    return printable(str(note).strip())[:500]


def _spark(runs: list[Any]) -> Markup:
    """A sparkline of runs (newest first in, oldest left out), as inline SVG: per run
    a bar whose height is its duration against the longest shown (at least a sliver)
    and whose colour is its result. Built here rather than in the template: a list of
    a thousand jobs would otherwise escape twenty attributes a bar."""
    if not runs:
        return Markup("")
    took = [0.0 if o.started is None else max(0.0, o.finished - o.started) for o in runs]
    top = max(took) or 1.0
    bars = []
    for i, (o, t) in enumerate(zip(reversed(runs), reversed(took), strict=True)):
        height = max(2.0, t / top * 16)
        result = o.result if o.result in RESULTS else escape(o.result)  # stored text
        bars.append(
            f'<rect class="{result}" x="{i * 5}" y="{18 - height:.1f}" width="4" '
            f'height="{height:.1f}"><title>{result} in {t:.3f}s</title></rect>'
        )
    return Markup(
        f'<svg width="100" height="18" viewBox="0 0 100 18" role="img" '
        f'aria-label="the last {len(runs)} runs">{"".join(bars)}</svg>'
    )


def _kept(entry: Any, wanted: str, now: float) -> bool:
    """Whether the list's filter ``wanted`` keeps ``entry``."""
    if wanted == "failed":
        return entry.last is not None and entry.last.result in ("failed", "retry")
    if wanted == "paused":
        return bool(entry.info.paused)
    if wanted == "overdue":
        return overdue(entry.info, now)
    return True


async def _favicon(request: Request) -> Response:
    """``GET /favicon.ico``: the dashboard's icon (browsers ask for it by that name)."""
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def _status_rank(entry: Any, now: float) -> tuple[int, str]:
    info = entry.info
    late = lateness(info, now)
    order = {"running": 0, "queued": 1, "failed": 2, "scheduled": 3, "done": 4, "cancelled": 5}
    rank = 2 if late == "overdue" else order.get(str(info.status), 6)
    return rank, str(info.task_id)


def _next_key(entry: Any, now: float) -> tuple[bool, float, str]:
    nxt = entry.info.next_run_time
    return nxt is None, 0.0 if nxt is None else float(nxt), str(entry.info.task_id)


def _last_key(entry: Any, now: float) -> tuple[int, float, str]:
    last = entry.last
    order = {"failed": 0, "retry": 1, "cancelled": 2, "ok": 3}
    if last is None:
        return 4, 0.0, str(entry.info.task_id)
    return order.get(last.result, 4), -float(last.finished), str(entry.info.task_id)


SORTS: dict[str, Callable[[Any, float], Any]] = {
    "job": lambda entry, now: str(entry.info.task_id),
    "status": _status_rank,
    "next": _next_key,
    "last": _last_key,
}
"""The jobs list's sortable columns: each a key of an entry at ``now``."""


UPCOMING = 5
"""The next slots a job's page lists (with what its calendar did to each)."""


def _upcoming(slot: Upcoming, tz: tzinfo) -> dict[str, str | None]:
    """One of a job's next slots as its page shows it: the time it runs (the slot's
    own when it does not), and what its calendar did: ``moved from ...``, or
    ``excluded: ...``."""
    if slot.at is None:
        return {"time": time_shown(slot.slot, tz), "mark": "excluded",
                "note": f"excluded: {slot.reason}" if slot.reason else "merged"}  # fmt: skip
    if slot.reason is None:
        return {"time": time_shown(slot.at, tz), "mark": None, "note": None}
    return {"time": time_shown(slot.at, tz), "mark": "moved",
            "note": f"moved from {day_shown(slot.slot, tz)} ({slot.reason})"}  # fmt: skip


def _summary(entries: list[Any], now: float) -> dict[str, int]:
    """The counts the jobs page heads with, over every job. O(n)."""
    counts = {"jobs": len(entries), "failing": 0, "paused": 0, "overdue": 0, "running": 0}
    for entry in entries:
        info, last = entry.info, entry.last
        counts["failing"] += last is not None and last.result in ("failed", "retry")
        counts["paused"] += bool(info.paused)
        counts["overdue"] += overdue(info, now)
        counts["running"] += str(info.status) in ("running", "queued")
    return counts


def _page_numbers(current: int, last: int) -> list[int | None]:
    """The page links to show: the first, the last, and two either side of the
    current one; ``None`` where numbers are left out (an ellipsis)."""
    wanted = sorted({1, last, *range(max(1, current - 2), min(last, current + 2) + 1)})
    shown: list[int | None] = []
    for number in wanted:
        previous = shown[-1] if shown else None
        if previous is not None and number - previous > 1:
            shown.append(None)
        shown.append(number)
    return shown


def _chart(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Duration and lag of the runs, oldest first, as SVG polyline points with a
    seconds axis (ticks at 0, half and the top) and its oldest/newest ends labelled
    (server-side: no chart library in the page)."""
    points = [(h["took"], h["lag"]) for h in history if h["took"] is not None]
    if len(points) < 2:
        return None
    width, height, left, bottom, top_pad = 600, 150, 44, 14, 24
    top = max(max(t, lag, 0.0) for t, lag in points) or 1.0
    step = (width - left) / (len(points) - 1)
    span = height - bottom - top_pad

    def y(value: float) -> float:
        return height - bottom - max(value, 0.0) / top * span

    def line(values: list[float]) -> str:
        return " ".join(f"{left + i * step:.1f},{y(v):.1f}" for i, v in enumerate(values))

    ticks = [{"y": round(y(v), 1), "label": f"{v:.3g}"} for v in (0.0, top / 2, top)]
    return {
        "width": width, "height": height, "left": left, "ticks": ticks,
        "duration": line([t for t, _ in points]), "lag": line([lag for _, lag in points]),
    }  # fmt: skip


def _instant(value: object) -> float:
    """A time given to the API: epoch seconds, or ISO 8601 with an offset."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no offset (write +00:00 or Z)")
        return parsed.timestamp()
    raise TypeError(f"{value!r} is not a time")


def _limit(raw: str) -> int | None:
    """A ``?limit=`` value: an int >= 1, else ``None``."""
    try:
        limit = int(raw)
    except ValueError:
        return None
    return limit if limit >= 1 else None
