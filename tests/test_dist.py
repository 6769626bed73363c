"""The release: what ``make dist`` builds installs and works where nothing else is.

The sdist and wheel are built as ``make dist`` builds them (``python -m build``,
then ``twine check --strict``); the wheel is installed into a new virtual
environment with no extras, where the command and the import work and a cron job
needs the cron extra, then with ``[cron,postgres,web]`` from the same wheel, where
each extra's module imports and the example job file plans in full. Installing
from the package index makes this the slowest test (about a minute).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import rota

ROOT = Path(__file__).parents[1]
BOUND = 600  # seconds for any one step: an index that does not answer fails the test


def _run(*argv: str | Path, cwd: Path = ROOT, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env,
        check=False,
    )
    if ok:
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    _run(sys.executable, "-m", "twine", "check", "--strict", *sorted(out.iterdir()))
    return out


def test_the_sdist_and_wheel_carry_the_package_under_its_name(built: Path) -> None:
    names = sorted(path.name for path in built.iterdir())
    assert names == [
        f"rota-{rota.__version__}-py3-none-any.whl",
        f"rota-{rota.__version__}.tar.gz",
    ]
    with zipfile.ZipFile(built / names[0]) as wheel:
        files = wheel.namelist()
        metadata = wheel.read(f"rota-{rota.__version__}.dist-info/METADATA").decode()
    assert "rota/py.typed" in files
    assert "rota/web/templates/base.html" in files
    tops = {name.split("/")[0] for name in files}
    assert tops == {"rota", f"rota-{rota.__version__}.dist-info"}
    assert "Requires-Dist" not in metadata.split("Provides-Extra")[0]  # no dependency
    for line in ("Name: rota", "Classifier: Typing :: Typed", "Keywords: ", "Project-URL: "):
        assert line in metadata, line


def test_the_project_urls_name_files_of_this_repository() -> None:
    """Placeholders until the project has a public address (docs/release.md)."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls
    for label, path in urls.items():
        assert (ROOT / path).is_file(), (label, path)


def test_the_wheel_installs_and_runs_alone_then_with_its_extras(
    built: Path, tmp_path: Path
) -> None:
    wheel = next(built.glob("*.whl"))
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python, command = env / "bin" / "python", env / "bin" / "rota"
    _run(python, "-m", "pip", "install", "--quiet", wheel)
    away = tmp_path  # not the checkout: src/ must not be what is imported

    assert _run(command, "--version", cwd=away).stdout.strip() == f"rota {rota.__version__}"
    assert _run(python, "-m", "rota", "--version", cwd=away).stdout.strip().startswith("rota ")
    imported = _run(python, "-c", "import rota; print(rota.__file__)", cwd=away).stdout
    assert imported.startswith(str(env))
    # the example job file: its cron job needs the cron extra, and says so (exit 2,
    # the core installs no dependency);    # its other jobs plan with the standard library alone
    example = ROOT / "examples" / "jobs.toml"
    refused = _run(command, "plan", example, cwd=away, ok=False)
    assert refused.returncode == 2
    assert "nightly-report" in refused.stderr
    assert "pip install 'rota[cron]'" in refused.stderr
    plain = tmp_path / "jobs.toml"
    plain.write_text(example.read_text().split('[[jobs]]\nid = "nightly-report"')[0])
    planned = _run(command, "plan", plain, "--until", "+10s", "--json", cwd=away).stdout
    assert '"job": "heartbeat"' in planned

    _run(python, "-m", "pip", "install", "--quiet", f"{wheel}[cron,postgres,web]")
    for extra in ("import rota.cron", "from rota.store import PostgresStore",
                  "import rota.web", "import rota.metrics"):  # fmt: skip
        _run(python, "-c", extra, cwd=away)
    planned = _run(command, "plan", example, "--json", cwd=away).stdout
    assert '"job": "nightly-report"' in planned
