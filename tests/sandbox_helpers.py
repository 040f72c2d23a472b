"""What the sandbox's test files share: the hostile corpus, the limits they run it under, and how a test's folder
of sandbox directories is checked (tests/conftest.py's `sandbox_parent`)."""

from __future__ import annotations

import ctypes
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import processes_under

from evolve.sandbox._isolation import landlock_abi
from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult

HOSTILE = Path(__file__).parent / "hostile"
# fresh_children_first=0: every child of these tests is forked by the fork server (test_fork_server.py has more).
# The wall limit is far above what any of them needs (a call that should end "ok" must not time out on a loaded
# machine); a test of a limit sets its own.
LIMITS = SandboxLimits(wall_time_s=20.0, cpu_time_s=1.0, memory_mb=512, max_processes=32, max_output_bytes=200_000,
                       fresh_children_first=0)
LANDLOCK_ABI = landlock_abi(ctypes.CDLL(None, use_errno=True))
needs_landlock = pytest.mark.skipif(LANDLOCK_ABI == 0, reason="this kernel has no Landlock")


def run(sandbox: Sandbox, name: str, *args: object) -> SandboxResult:
    return sandbox.call(HOSTILE / f"{name}.py", "solve", *args)


def checked_sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test's sandbox directories go in a folder of its own; afterwards it must be empty and no
    process may still be working in it."""
    parent = tmp_path / "sandboxes"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    yield parent
    assert os.listdir(parent) == []
    time.sleep(0.05)
    assert processes_under(parent) == []
