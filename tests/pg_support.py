"""A throwaway PostgreSQL server for the store tests: Debian's ``postgresql`` binaries, ``initdb``
into a temporary folder, ``pg_ctl start`` on 127.0.0.1 and a free port (socket in that folder too),
one fresh database per test, stopped at the end of the session.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` OS user
(``runuser -u postgres --``) in a folder that user owns. Without the binaries the tests skip, unless
``MESHPLAN_REQUIRE_POSTGRES=1`` (CI), where they fail."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api_support import free_port

REQUIRE_ENV = "MESHPLAN_REQUIRE_POSTGRES"
OS_USER = "postgres"


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that has ``initdb`` and ``pg_ctl``."""
    found = [
        Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb") if Path(p).with_name("pg_ctl").exists()
    ]
    return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0, default=None)


def unavailable(reason: str) -> None:
    message = f"{reason}; install it with `apt-get install -y postgresql` (CI does)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} — {REQUIRE_ENV}=1 requires the PostgreSQL tests to run", pytrace=False)
    pytest.skip(message)


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path  # owned by the server's OS user; holds data/, the socket and the log
    port: int = 0

    @property
    def as_user(self) -> list[str]:
        return ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=60, cwd=self.root)

    def start(self) -> PostgresServer:
        data = self.root / "data"
        done = self._run(str(self.bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            self.port = free_port()
            options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
            done = self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            )
            if done.returncode == 0:
                return self
        raise RuntimeError(
            f"pg_ctl start failed: {done.stderr[-1000:]} {(self.root / 'server.log').read_text()[-2000:]}"
        )

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE) as the superuser."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql)

    def new_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def pg_server():
    bin_dir = find_bin_dir()
    if bin_dir is None:
        unavailable("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("the psycopg driver is not installed (pip install 'meshplan[postgres]')")
    root = Path(tempfile.mkdtemp(prefix="meshplan-pg-"))  # under /tmp: the postgres user can reach it
    if os.geteuid() == 0:
        user = pwd.getpwnam(OS_USER)
        os.chown(root, user.pw_uid, user.pw_gid)
    server = PostgresServer(bin_dir, root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """A URL of a fresh, empty database on the session's server."""
    return pg_server.new_database()
