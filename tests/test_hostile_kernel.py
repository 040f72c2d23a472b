"""Containment that holds as root and as any user: a private uid, a PID namespace, the seccomp filter's refusals,
memory as the kernel counts it, and /dev/pts, /dev/shm, /sys and /proc out of reach. Each test checks the host
side: a file's mode, times and extended attributes, another process's limits, priority and CPUs, no process left.

Run as root by the suite, and again as an unprivileged user by the last test here (through scripts/dev/as_user.py,
with the user `evolve-ci` that .ci/run creates): the same assertions hold for both.
"""

from __future__ import annotations

import errno
import os
import pwd
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import none_left, sleep_marker

from evolve.sandbox._seccomp import refused_names
from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult
from evolve.sandbox.forkserver import process_state

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = Path(__file__).parent / "hostile"
LIMITS = SandboxLimits(wall_time_s=20.0, cpu_time_s=5.0, memory_mb=256, max_processes=32)
CI_USER = "evolve-ci"


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder any uid can reach (not under pytest's private folders), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="evolve-hostile-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(LIMITS) as box:  # the second call on is forked from its server: both paths run below
        yield box


def run(sandbox: Sandbox, name: str, *args: object) -> SandboxResult:
    return sandbox.call(HOSTILE / f"{name}.py", "solve", *args)


def file_state(path: Path) -> tuple[object, ...]:
    info = os.stat(path)
    attributes = {name: os.getxattr(path, name) for name in os.listxattr(path)}
    return info.st_mode, info.st_uid, info.st_gid, info.st_mtime_ns, info.st_atime_ns, attributes


@pytest.mark.parametrize("attempt", [1, 2])  # a fresh child, then a forked one
def test_file_metadata_outside_and_inside_its_folder_cannot_change(sandbox: Sandbox, reachable: Path,
                                                                   attempt: int) -> None:
    victim = reachable / "program"
    shutil.copyfile("/bin/true", victim)
    victim.chmod(0o755)
    os.setxattr(victim, "user.kept", b"1")
    before = file_state(victim)
    result = run(sandbox, "file_metadata", str(victim))
    assert result.status == "ok", result
    assert set(result.value.values()) == {errno.EPERM}, result.value
    assert file_state(victim) == before


@pytest.fixture
def victim_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the engine's own uid, as the engine and its fork server are."""
    process = subprocess.Popen(["sleep", sleep_marker()])
    yield process
    process.kill()
    process.wait()


def test_another_process_limits_priority_and_cpus_cannot_change(sandbox: Sandbox,
                                                                 victim_process: subprocess.Popen[bytes]) -> None:
    before = process_state(victim_process.pid)
    result = run(sandbox, "other_process", victim_process.pid)
    assert result.status == "ok", result
    outcome = result.value
    assert outcome["pid"] == 2 and outcome["parent"] == 1, outcome  # its own PID namespace, under an init
    changed = {name: value for name, value in outcome.items() if value == "done"}
    assert changed == {}, outcome
    assert outcome["own_limits_readable"] is True
    assert process_state(victim_process.pid) == before
    assert victim_process.poll() is None


def test_kernel_surface_calls_are_refused_with_eperm(sandbox: Sandbox) -> None:
    result = run(sandbox, "kernel_surface", 0)
    assert result.status == "ok", result
    assert result.value == dict.fromkeys(result.value, errno.EPERM), result.value
    names = set(refused_names(os.uname().machine))
    assert {"chmod", "fchownat", "utimensat", "setxattr", "prlimit64", "setpriority", "sched_setaffinity", "mknodat",
            "mount", "unshare", "setns", "keyctl", "bpf", "perf_event_open", "userfaultfd", "memfd_create"} <= names


def test_terminals_shared_memory_cgroups_and_processes_are_unreadable(sandbox: Sandbox) -> None:
    name = f"evolve-test-{secrets.token_hex(6)}"
    shm = Path("/dev/shm") / name
    shm.write_bytes(b"the engine's secret")
    shm.chmod(0o644)
    try:
        result = run(sandbox, "read_devices", name)
    finally:
        shm.unlink()
    assert result.status == "ok", result
    leaked = {key: value for key, value in result.value.items() if not isinstance(value, int)}
    assert leaked in ({}, {"list_shm": "[]"}), result.value  # at most its own, empty, /dev/shm


@pytest.mark.parametrize("name", ["daemon", "orphan_grandchild"])
def test_daemons_and_orphans_end_with_the_evaluation(sandbox: Sandbox, name: str) -> None:
    marker = sleep_marker()
    result = run(sandbox, name, marker)
    assert result.status == "ok" and result.value == {"sleeping": True}, result
    assert none_left(marker)


def test_a_session_leaves_no_daemon_once_closed(sandbox: Sandbox) -> None:
    marker = sleep_marker()
    with sandbox.session(HOSTILE / "daemon.py", function="solve") as session:
        result = session.call(marker, limit_s=10.0)
        assert result.status == "ok" and result.value == {"sleeping": True}, result
    assert none_left(marker)


def test_pipe_buffers_are_counted_against_the_memory_limit() -> None:
    limits = SandboxLimits(wall_time_s=30.0, cpu_time_s=10.0, memory_mb=128, max_written_mb=16, max_processes=16)
    with Sandbox(limits) as box:
        result = run(box, "pipe_hoard", 1024)
    assert result.status == "memory" or (result.status == "ok" and result.value <= 128 + 16), result


def test_a_root_candidate_runs_under_a_private_uid_whatever_the_interpreter_folder_mode(sandbox: Sandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("as a user the candidate keeps the user's uid, in a user namespace of its own")
    result = run(sandbox, "read_secrets", 0)
    assert result.status == "ok", result
    assert result.value["uid"] not in (0, os.getuid()), result.value


def test_the_hostile_cases_hold_as_an_unprivileged_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("this run is the unprivileged one")
    try:
        pwd.getpwnam(CI_USER)
    except KeyError:
        if os.environ.get("EVOLVE_REQUIRE_USER_TESTS") == "1":
            pytest.fail(f"no user {CI_USER}: .ci/run creates it (useradd --system {CI_USER})")
        pytest.skip(f"no user {CI_USER} to run the hostile cases as")
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dev" / "as_user.py"), CI_USER, "--", sys.executable, "-m", "pytest", "-q",
         "-p", "no:cacheprovider", "--no-header", str(Path(__file__)), str(ROOT / "tests" / "test_containment.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    summary = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else completed.stderr[-2000:]
    assert completed.returncode == 0 and " passed" in summary and "failed" not in summary, \
        completed.stdout[-4000:] + completed.stderr[-2000:]


def test_reading_its_own_limits_still_works(sandbox: Sandbox, tmp_path: Path) -> None:
    program = tmp_path / "limits.py"
    program.write_text("import resource\n\ndef solve(x):\n    return resource.getrlimit(resource.RLIMIT_AS)\n")
    result = sandbox.call(program, "solve", 0)
    assert result.status == "ok" and result.value[0] == LIMITS.memory_mb * 1024 * 1024, result
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != LIMITS.memory_mb * 1024 * 1024  # not this process's
