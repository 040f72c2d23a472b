"""A throwaway PostgreSQL server on loopback for tests and scripts: initdb + pg_ctl in a temporary folder, trust
auth, stopped (and its folder deleted) on leaving.

    with postgres_server() as server:          # raises PostgresUnavailable where there is no server binary
        url = server.create_database("run1")    # postgresql+psycopg://evolve@127.0.0.1:PORT/run1, a fresh database

PostgreSQL refuses to run as root: as root the server runs as `nobody` (runuser), and its folder is opened to it.
The server trades durability for speed (fsync off): it is for tests, never for data that must survive a crash of
the machine. A killed process's committed rows are still there (the server itself is not killed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evolve.ports import free_port

REQUIRE_ENV = "EVOLVE_REQUIRE_POSTGRES"  # "1" (set by .ci/run): a missing server fails the tests instead of skipping
USER = "evolve"
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binary (or no psycopg driver) on this machine; the message says what is missing."""


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() == "1"


def find_server_binaries() -> tuple[Path, Path]:
    """(initdb, pg_ctl): the newest /usr/lib/postgresql/*/bin (Debian's layout), else $PATH."""
    def version(folder: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", folder.parent.name)) or (0,)

    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True):
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder / "initdb", folder / "pg_ctl"
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb), Path(pg_ctl)
    raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on "
                              "$PATH: install Debian's `postgresql` package (bash scripts/install/install_postgres.sh)")


@dataclass(frozen=True)
class PostgresServer:
    """A running server: `url(name)` is an SQLAlchemy URL of one of its databases."""

    port: int
    folder: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database `name` (lower-case letters, digits, _); its URL."""
        import psycopg

        if not _DATABASE_NAME.fullmatch(name):
            raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only, at most 63")
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]  # checked name, no params
        return self.url(name)


def _open_to(user_folder: Path) -> None:
    """Let `nobody` reach `user_folder`: o+x on every parent, rwx on the folder itself."""
    user_folder.chmod(0o777)
    for parent in user_folder.parents:
        mode = parent.stat().st_mode
        if parent != Path("/") and mode & 0o001 == 0:
            parent.chmod(mode | 0o001)


@contextmanager
def postgres_server(folder: Path | None = None) -> Iterator[PostgresServer]:
    """Start a server in `folder` (a new temporary folder if None, deleted afterwards) and stop it on leaving."""
    try:
        import psycopg  # noqa: F401  (the driver the URLs name)
    except ImportError as exc:
        raise PostgresUnavailable("no psycopg (pip install 'psycopg[binary]'; it is in the dev extra)") from exc
    initdb, pg_ctl = find_server_binaries()
    owned = folder is None
    base = Path(tempfile.mkdtemp(prefix="evolve-pg-")) if folder is None else folder
    base.mkdir(parents=True, exist_ok=True)
    as_user: list[str] = []
    if os.geteuid() == 0:
        _open_to(base)
        as_user = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "nobody", "--"]
    data, log = base / "data", base / "server.log"
    started = False
    try:
        made = subprocess.run([*as_user, str(initdb), "-D", str(data), "-A", "trust", "-U", USER, "-E", "UTF8",
                               "--no-instructions"], capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {(made.stderr or made.stdout).strip()[-2000:]}")
        for attempt in range(3):  # the free port may be taken between the probe and the server's bind
            port = free_port()
            options = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                       "-c full_page_writes=off -c max_connections=300")
            result = subprocess.run([*as_user, str(pg_ctl), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                     "-o", options, "start"], capture_output=True, text=True, timeout=120)
            if result.returncode == 0:
                started = True
                break
            if attempt == 2:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else result.stderr
                raise PostgresUnavailable(f"PostgreSQL did not start: {tail.strip()}")
        yield PostgresServer(port=port, folder=base)
    finally:
        if started:
            subprocess.run([*as_user, str(pg_ctl), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                           timeout=60)
        if owned:
            shutil.rmtree(base, ignore_errors=True)
