"""Reading a store needs read permission only, and writes nothing: `runs`, `show`, `lineage`, `export` and `serve`
leave the store's bytes, its modification time and its folder's listing as they were (no -wal or -shm left beside
it, no table or pragma written), and an unprivileged user reads a store it may not write (another user's, in a
folder it cannot write, in WAL mode with or without a writer at work) instead of failing with "attempt to write a
readonly database".

The user-side tests run commands as the user `evolve-ci` through scripts/dev/as_user.py (root only: elsewhere they skip);
EVOLVE_REQUIRE_USER_TESTS=1 (CI) makes a missing user a failure, as in test_hostile_kernel.py."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_run import start_serve
from test_hardening import small_store

from evolve.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
CI_USER = "evolve-ci"
READING = [["runs"], ["show", "1"], ["show", "1", "--json"], ["lineage", "1"], ["export", "1"]]
ROUTES = ["/api/runs", "/api/experiments", "/api/runs/1", "/api/runs/1/tree", "/api/runs/1/programs/2", "/runs/1",
          "/runs/1/lineage/3"]


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of the folder: its bytes, modification time (ns) and mode."""
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_mode)
            for path in sorted(folder.iterdir())}


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A store in WAL mode, runs.db, alone in a folder any uid can reach but only root may write (mode 755), the
    file itself mode 644: another user's store as the unprivileged user sees it."""
    folder = Path(tempfile.mkdtemp(prefix="evolve-shared-", dir="/tmp"))
    db = folder / "runs.db"
    shutil.copyfile(small_store(tmp_path), db)
    with db.open("rb") as file:
        assert file.read(20)[18:20] == b"\x02\x02"  # WAL mode, as every store evolve writes
    db.chmod(0o644)
    folder.chmod(0o755)
    yield db
    shutil.rmtree(folder)


def test_reading_commands_leave_the_bytes_the_time_and_the_folder_of_the_store_as_they_were(
        shared: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(shared.parent)
    for command in READING:
        assert main([*command, "--db", str(shared)]) == 0, capsys.readouterr()
        assert snapshot(shared.parent) == before, command


def test_serving_a_store_leaves_its_bytes_its_time_and_its_folder_as_they_were(shared: Path) -> None:
    before = snapshot(shared.parent)
    server = start_serve(shared)
    try:
        for route in ROUTES:
            assert httpx.get(server.base + route).status_code == 200, route
            assert snapshot(shared.parent) == before, route
    finally:
        server.stop()
    assert snapshot(shared.parent) == before
    with sqlite3.connect(f"{shared.as_uri()}?mode=ro", uri=True) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    connection.close()


def as_user(*command: str) -> list[str]:
    """`command` run as CI_USER (skips where that cannot be done; fails in CI when the user is missing)."""
    if os.geteuid() != 0:
        pytest.skip("running as a user already: the tests above are this user's")
    try:
        pwd.getpwnam(CI_USER)
    except KeyError:
        if os.environ.get("EVOLVE_REQUIRE_USER_TESTS") == "1":
            pytest.fail(f"no user {CI_USER}: .ci/run creates it (useradd --system {CI_USER})")
        pytest.skip(f"no user {CI_USER} to read the store as")
    return [sys.executable, str(ROOT / "scripts" / "dev" / "as_user.py"), CI_USER, "--", *command]


def evolve_as_user(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(as_user(sys.executable, "-m", "evolve", *args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_a_user_reads_a_store_it_may_not_write_with_no_writer_at_work(shared: Path) -> None:
    before = snapshot(shared.parent)
    for command in READING:
        done = evolve_as_user(*command, "--db", str(shared))
        assert done.returncode == 0 and "readonly database" not in done.stdout + done.stderr, (command, done.stderr[-2000:])
        assert snapshot(shared.parent) == before, command


def test_a_user_reads_a_store_it_may_not_write_while_its_owner_writes_it(shared: Path) -> None:
    writer = sqlite3.connect(shared)  # the owner's run, at work: its -wal and -shm are there, its commit in the -wal
    try:
        writer.execute("UPDATE runs SET name = 'renamed-while-open'")
        writer.commit()
        assert {path.name for path in shared.parent.iterdir()} == {"runs.db", "runs.db-wal", "runs.db-shm"}
        listing = sorted(path.name for path in shared.parent.iterdir())
        done = evolve_as_user("show", "1", "--json", "--db", str(shared))
        assert done.returncode == 0 and '"name": "renamed-while-open"' in done.stdout, done.stderr[-2000:]
        assert sorted(path.name for path in shared.parent.iterdir()) == listing
    finally:
        writer.close()


def test_a_user_serves_a_store_it_may_not_write(shared: Path) -> None:
    before = snapshot(shared.parent)
    process = subprocess.Popen(as_user(sys.executable, "-m", "evolve", "serve", "--db", str(shared), "--port", "0"),
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    try:
        assert process.stdout is not None
        address = None
        for line in process.stdout:  # it prints its address once it listens, or an error and exits
            found = re.search(r"(http://\S+)", line)
            if found:
                address = found.group(1).rstrip("/")
                break
        assert address is not None, "evolve serve as the user printed no address"
        for route in ROUTES:
            response = httpx.get(address + route)
            assert response.status_code == 200, (route, response.text[:500])
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert snapshot(shared.parent) == before
