"""Every recipe of docs/web.md runs, in the real framework, for a DurableScheduler
(as written) and for an in-memory Scheduler (the alternative its comment gives), and
the dashboard it mounts answers under its prefix beside the framework's own routes."""

from __future__ import annotations

import pathlib
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rota import DurableScheduler, FixedRate
from tests.test_readme import blocks

WEB = pathlib.Path(__file__).parents[2] / "docs" / "web.md"
DURABLE = 'DurableScheduler(SQLiteStore("jobs.db"))'


def recipe(title: str) -> str:
    """The python block of the section of docs/web.md titled ``title``."""
    section = WEB.read_text().split("\n## " + title, 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return str(block)


def test_every_block_is_tested() -> None:
    assert len(blocks(WEB)) == 4  # the collector, and the three recipes here


def run(title: str, kind: str) -> types.ModuleType:
    code = recipe(title)
    assert DURABLE in code
    if kind == "memory":
        code = code.replace(DURABLE, "Scheduler()").replace(
            "from rota import DurableScheduler", "from rota import Scheduler"
        )
    module = types.ModuleType(f"recipe_{kind}")
    exec(compile(code, f"docs/web.md ({title})", "exec"), module.__dict__)
    return module


@pytest.fixture(params=["durable", "memory"])
def kind(request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: Any) -> str:
    monkeypatch.chdir(tmp_path)  # the recipes' jobs.db
    return str(request.param)


def use(scheduler: Any) -> None:
    """A task on the recipe's scheduler, as the app's own code would add."""
    if isinstance(scheduler, DurableScheduler):
        scheduler.schedule("nightly/report", FixedRate(3600), "os:getcwd", args=[])
    else:
        scheduler.schedule("nightly/report", FixedRate(3600), lambda at: None)


def check(get: Callable[[str], tuple[int, str]], post: Callable[[str], int]) -> None:
    status, page = get("/rota/")
    assert status == 200
    assert 'href="/rota/jobs/nightly%2Freport"' in page
    assert 'src="/rota/static/htmx.min.js"' in page
    status, body = get("/rota/api/jobs")
    assert status == 200
    assert '"id":"nightly/report"' in body
    assert get("/rota/jobs/nightly%2Freport")[0] == 200
    assert get("/rota/metrics")[0] == 200
    assert post("/rota/api/jobs/nightly%2Freport/pause") == 200
    assert post("/rota/api/jobs/nightly%2Freport/pause") == 409


def test_fastapi(kind: str) -> None:
    from starlette.testclient import TestClient

    recipe_module = run("Mount in FastAPI", kind)

    recipe_module.app.add_api_route("/", lambda: {"app": "yours"})

    use(recipe_module.scheduler)
    client = TestClient(recipe_module.app)
    assert client.get("/").json() == {"app": "yours"}
    check(lambda p: ((r := client.get(p)).status_code, r.text),
          lambda p: client.post(p).status_code)  # fmt: skip


def test_flask(kind: str) -> None:
    recipe_module = run("Mount in Flask", kind)

    recipe_module.app.add_url_rule("/", "home", lambda: "yours")

    use(recipe_module.scheduler)
    client = recipe_module.app.test_client()
    assert client.get("/").data == b"yours"
    check(lambda p: ((r := client.get(p)).status_code, r.data.decode()),
          lambda p: client.post(p).status_code)  # fmt: skip


@pytest.fixture
def django_site() -> Iterator[None]:
    """A Django project of one view, as ``mysite.settings`` would configure it."""
    import django
    from django.conf import settings
    from django.http import HttpResponse
    from django.urls import path

    urls = types.ModuleType("recipe_urls")
    urls.urlpatterns = [path("", lambda request: HttpResponse("yours"))]  # type: ignore[attr-defined]
    sys.modules["recipe_urls"] = urls
    from django.urls import clear_url_caches

    if not settings.configured:  # (another test of the session may have configured it)
        settings.configure(INSTALLED_APPS=[])
        django.setup()
    wanted = {"ROOT_URLCONF": "recipe_urls", "ALLOWED_HOSTS": ["*"], "SECRET_KEY": "test"}
    held: Any = settings._wrapped  # (reading SECRET_KEY through settings checks it)
    before = {name: getattr(held, name, None) for name in wanted}
    for name, value in wanted.items():
        setattr(settings, name, value)
    clear_url_caches()
    try:
        yield
    finally:
        for name, old in before.items():
            setattr(settings, name, old)
        clear_url_caches()
        del sys.modules["recipe_urls"]


def test_django(kind: str, django_site: None) -> None:
    from starlette.testclient import TestClient

    recipe_module = run("Mount in Django", kind)
    use(recipe_module.scheduler)
    client = TestClient(recipe_module.application)
    assert client.get("/").text == "yours"
    check(lambda p: ((r := client.get(p)).status_code, r.text),
          lambda p: client.post(p).status_code)  # fmt: skip
