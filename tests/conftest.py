"""Shared pytest fixtures: a throwaway PostgreSQL server for the session, a fresh database of it per test,
`store_url`, which runs a store test on both SQLite and PostgreSQL, and the sandbox tests' `sandbox` and checked
`sandbox_parent` folder."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import PostgresServer, PostgresUnavailable, postgres_required, postgres_server
from sandbox_helpers import LIMITS as SANDBOX_LIMITS
from sandbox_helpers import checked_sandbox_parent

from evolve.sandbox.core import Sandbox

STORE_BACKENDS = ["sqlite", "postgresql"]
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers get COLUMNS=80 and LINES=24 of their own; the tests that read the CLI's lines expect
    # what a pipe without COLUMNS gets (the lines whole), as in a plain pytest run
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        # the workers share the cores: a local model with threads = 0 takes one thread, not one per core
        # (llama.cpp's and torch's threads spin while waiting for each other, and a busy core makes that slow:
        # 2.6x slower generation measured with the suite's load); subprocesses inherit it
        os.environ.setdefault("EVOLVE_THREADS", "1")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session; skipped where none can run (failed if EVOLVE_REQUIRE_POSTGRES=1).
    Its folder is its own under the system's temporary folder, not under pytest's: as root the server runs as
    `nobody`, and every pytest session (another one on this machine too) takes o+x off pytest's base folder."""
    try:
        with postgres_server() as server:
            yield server
    except PostgresUnavailable as exc:
        if postgres_required():
            pytest.fail(f"EVOLVE_REQUIRE_POSTGRES=1 but {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture
def postgresql_url(postgres: PostgresServer) -> str:
    """The SQLAlchemy URL of a new, empty database: every test gets its own."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:20]}")


@pytest.fixture(params=STORE_BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's store lives, once per backend: a SQLite file path, or a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("postgresql_url"))


@pytest.fixture(scope="module", params=STORE_BACKENDS)
def module_store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """store_url for a module-scoped fixture (a store built once and read by many tests), once per backend."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("store") / "store.db")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"m_{uuid.uuid4().hex[:20]}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (tests/file_seconds.json, measured by scripts/dev/test_file_seconds.py; a file not in it
    that holds a `slow` test counts as longest), each file's tests kept in their order: scripts/test.sh hands whole
    files to parallel workers in this order, so the long files start at once instead of ending the run alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    table = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}
    root = Path(str(config.rootpath))

    def seconds(path: Path) -> float:
        known = table.get(path.relative_to(root).as_posix()) if path.is_relative_to(root) else None
        return float(known) if known is not None else (float("inf") if path in slow_files else 0.0)

    items.sort(key=lambda item: -seconds(item.path))  # a stable sort: files and tests keep their order


@pytest.fixture
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of its own for the test's sandbox directories, empty and with no process working in it at the end
    (a module that needs it on every test marks them `pytest.mark.usefixtures("sandbox_parent")`)."""
    yield from checked_sandbox_parent(tmp_path, monkeypatch)


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(SANDBOX_LIMITS)
