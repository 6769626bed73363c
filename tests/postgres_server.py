"""Run a command beside a throwaway PostgreSQL server on loopback.

``python tests/postgres_server.py [--durable] -- COMMAND...`` (what ``make test``
does; ``make bench`` adds ``--durable``: fsync on, as in production, where tests
run with ``fsync=off`` for speed; a server crash is still survived, an OS crash
would not be):

1. finds PostgreSQL's server binaries (``/usr/lib/postgresql/*/bin``); when
   they are missing and this runs as root with ``apt-get`` (a fresh CI
   machine), installs Debian's ``postgresql`` package first;
2. ``initdb`` into a temporary directory, as a non-root user (``postgres``,
   which the package creates), and starts the server on 127.0.0.1 at a free
   port, with its socket in that directory;
3. runs COMMAND with ``ROTA_PG_DSN`` set to the server, and returns its
   exit status;
4. stops the server (``pg_ctl stop -m fast``) and removes the directory,
   whatever happened (SIGTERM, SIGHUP and Ctrl-C included).

When no server can be had (not root, no binaries), COMMAND runs without
``ROTA_PG_DSN``: the PostgreSQL tests then skip, saying how to run them;
in CI (``CI`` set) they fail instead (``tests/conftest.py``).

The dashboard's browser tests need Chromium: when ``chromium`` is missing and
this runs as root with ``apt-get``, Debian's ``chromium`` package is installed
too, and ``ROTA_CHROMIUM`` names it for the command (``tests/web/conftest.py``:
without it the browser tests skip, and fail in CI).

The hand-off tests need Redis: Debian's ``redis-server`` (installed likewise when
missing) is started on 127.0.0.1 at a free port, in a temporary directory of its
own, with no persistence, and ``ROTA_REDIS_URL`` names it
(``tests/handoff/conftest.py``); it is stopped at the end, as PostgreSQL is.
Celery is also tested over RabbitMQ, its reference broker: as root, Debian's
``rabbitmq-server`` is installed likewise and started on 127.0.0.1 (its port,
distribution port and port mapper all loopback, boot in about 13 s, beside
PostgreSQL's), and ``ROTA_AMQP_URL`` names it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def binaries() -> Path | None:
    """The newest installed PostgreSQL ``bin`` directory, installing it if need be."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        print("postgres_server: installing Debian's postgresql package", file=sys.stderr)
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        # No default cluster: the package would create and start one on port 5432,
        # left running after the tests. Ours lives in a temporary directory.
        subprocess.run([*install, "postgresql-common"], check=True, env=env)
        with open("/etc/postgresql-common/createcluster.conf", "a") as conf:
            conf.write("\ncreate_main_cluster = false\n")
        subprocess.run([*install, "postgresql"], check=True, env=env)
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(found[-1]).parent if found else None


def chromium() -> str | None:
    """Debian's Chromium, installing it if need be (a browser for the dashboard's tests)."""
    return _debian("chromium", "chromium")


def redis_binary() -> str | None:
    """Debian's redis-server, installing it if need be (a broker for the hand-off tests)."""
    return _debian("redis-server", "redis-server")


def _debian(package: str, program: str) -> str | None:
    """``program`` on the PATH, after installing Debian's ``package`` when it is missing
    and this runs as root with ``apt-get`` (a fresh CI machine)."""
    found = shutil.which(program)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        print(f"postgres_server: installing Debian's {package} package", file=sys.stderr)
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
        if subprocess.run(install, env=env, check=False).returncode != 0:  # stale lists
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
            subprocess.run(install, check=True, env=env)
        found = shutil.which(program)
    return found


def listening(port: int, what: str, timeout: float = 30) -> None:
    """Wait (``timeout`` s at most) until something accepts connections on loopback
    ``port``; ``RuntimeError`` naming ``what`` if nothing does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


class Redis:
    """A redis-server on loopback at a free port, in a temporary directory, no persistence."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="rota-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
             str(self.dir), "--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, cwd=self.dir,
        )  # fmt: skip
        listening(self.port, "redis-server")

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class RabbitMQ:
    """A RabbitMQ broker on loopback at a free port, in a temporary directory: its
    node name, Erlang distribution port and port mapper are this run's own, on
    127.0.0.1 too. Started without waiting (:meth:`ready` waits), since it takes
    seconds to boot and PostgreSQL can start meanwhile."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="rota-rabbitmq-"))
        shutil.chown(self.dir, "rabbitmq", "rabbitmq")  # the server drops to that user
        self.port, self.epmd = free_port(), free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.env = {
            **os.environ, "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_NODENAME": f"rota{self.port}@localhost",
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary], env=self.env, cwd=self.dir, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def ready(self) -> None:
        listening(self.port, "rabbitmq-server", timeout=120)

    def stop(self) -> None:
        """Stop the broker's VM and its port mapper, which leave the wrapper's session
        (the server drops to its user, the mapper daemonizes): found by the port
        mapper's port in their environment, which only this run's processes have."""
        try:
            mark = f"ERL_EPMD_PORT={self.epmd}".encode()
            for pid in _processes_with(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _processes_with(mark) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in _processes_with(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _processes_with(variable: bytes) -> list[int]:
    """The pids of processes whose environment has ``variable`` (``NAME=value``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if variable in environ:
                found.append(int(entry.name))
    return found


def _version(path: str) -> int:
    return int(Path(path).parts[4]) if Path(path).parts[4].isdigit() else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A PostgreSQL cluster in a temporary directory, run as a non-root user."""

    def __init__(self, bindir: Path, *, durable: bool = False) -> None:
        self.bindir = bindir
        self.fsync = "on" if durable else "off"
        self.dir = Path(tempfile.mkdtemp(prefix="rota-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, *argv: str) -> None:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        # from the server's own directory: the caller's may be closed to its user
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=self.dir)

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c fsync={self.fsync} -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.dir / "server.log"), "-w", "start")  # fmt: skip
        listening(self.port, "PostgreSQL")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: postgres_server.py [--durable] -- COMMAND...", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    durable = "--durable" in argv[: argv.index("--")]
    env = dict(os.environ)
    browser = env.get("ROTA_CHROMIUM") or chromium()
    if browser is not None:
        env["ROTA_CHROMIUM"] = browser
    for signum in (signal.SIGTERM, signal.SIGHUP):  # stopped from outside: still clean up
        signal.signal(signum, _exit)
    rabbitmq = None
    if (
        "ROTA_AMQP_URL" not in env
        and os.geteuid() == 0  # the server runs as a user of its own
        and (binary := _debian("rabbitmq-server", "rabbitmq-server")) is not None
    ):
        rabbitmq = RabbitMQ(binary)
        rabbitmq.start()
        env["ROTA_AMQP_URL"] = rabbitmq.url
    redis = None
    try:
        if "ROTA_REDIS_URL" not in env and (binary := redis_binary()) is not None:
            redis = Redis(binary)
            redis.start()
            env["ROTA_REDIS_URL"] = redis.url
        return _with_postgres(command, env, durable, rabbitmq)
    finally:
        if redis is not None:
            redis.stop()
        if rabbitmq is not None:
            rabbitmq.stop()


def _with_postgres(
    command: list[str], env: dict[str, str], durable: bool, rabbitmq: RabbitMQ | None
) -> int:
    """Run ``command`` beside a PostgreSQL server (one given in ``env``, or ours), once
    ``rabbitmq`` (if any) is ready."""
    if "ROTA_PG_DSN" in env:  # a server given from outside: use it
        if rabbitmq is not None:
            rabbitmq.ready()
        return subprocess.call(command, env=env)
    bindir = binaries()
    if bindir is None:
        print("postgres_server: no PostgreSQL here; its tests will skip", file=sys.stderr)
        if rabbitmq is not None:
            rabbitmq.ready()
        return subprocess.call(command, env=env)
    server = Server(bindir, durable=durable)
    server.start()
    try:
        if rabbitmq is not None:
            rabbitmq.ready()
        env["ROTA_PG_DSN"] = server.dsn
        env["ROTA_PG_BIN"] = str(bindir)
        env["ROTA_PG_DATA"] = str(server.data)
        return subprocess.call(command, env=env)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
