"""Containment beyond files: no network of any kind, no other process visible, a total write cap, the evaluator's
arguments out of argv, and temporary folders of killed processes removed at the next start."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import load_problem
from evolve.sandbox.core import Sandbox, SandboxLimits
from evolve.sandbox.housekeeping import make_owned_folder, owner_tag
from evolve.sandbox.supervisor import MAX_FOLDER_ENTRIES, folder_usage, remove_folder

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = Path(__file__).parent / "hostile"
LIMITS = SandboxLimits(wall_time_s=5.0, cpu_time_s=3.0, memory_mb=512, max_processes=32, max_output_bytes=200_000)
NAMESPACES = subprocess.run(
    [sys.executable, "-c", "import ctypes; from evolve.sandbox._isolation import enter_namespaces; "
     "assert enter_namespaces(ctypes.CDLL(None, use_errno=True))"], cwd=ROOT, capture_output=True).returncode == 0
SLOW_FIZZBUZZ = "import time\n\ndef fizzbuzz(n):\n    time.sleep(0.05)\n    return str(n)\n"


@pytest.fixture(autouse=True)
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test's temporary folders go in a folder of its own, which must be empty afterwards."""
    parent = tmp_path / "temporary"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    yield parent
    assert os.listdir(parent) == []


def run(name: str, *args: object, limits: SandboxLimits = LIMITS) -> object:
    result = Sandbox(limits).call(HOSTILE / f"{name}.py", "solve", *args)
    assert result.status == "ok", result
    return result.value


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


# ---------------------------------------------------------------- no network


def test_udp_to_a_loopback_port_the_test_listens_on_never_arrives() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.3)
        outcome = run("udp_send", listener.getsockname()[1])
        assert outcome == {"sent": False, "error": "[Errno 13] Permission denied"}
        with pytest.raises(TimeoutError):
            listener.recv(64)


def test_a_unix_socket_outside_the_readable_folders_cannot_be_reached(tmp_path: Path) -> None:
    path = str(tmp_path / "listening.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(0.3)
        outcome = run("unix_socket", path)
        assert outcome["connected"] is False and "Permission denied" in outcome["error"], outcome
        with pytest.raises(TimeoutError):
            listener.accept()


@pytest.mark.skipif(not NAMESPACES, reason="this kernel refuses this user new namespaces")
def test_each_network_layer_stops_a_datagram_on_its_own() -> None:
    """The network namespace alone (no seccomp): loopback is down. The seccomp filter alone: no socket at all,
    while a socketpair (which reaches nothing) still works."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        namespace_only = run_python(f"""
            import ctypes, socket
            from evolve.sandbox._isolation import enter_namespaces
            assert enter_namespaces(ctypes.CDLL(None, use_errno=True))
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port}))
            except OSError as exc:
                print(exc.errno)
        """)
        seccomp_only = run_python(f"""
            import ctypes, socket
            from evolve.sandbox._isolation import refuse_syscalls
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(38, 1, 0, 0, 0)
            assert refuse_syscalls(libc)
            left, right = socket.socketpair()
            left.send(b"y")
            assert right.recv(1) == b"y"
            for family, kind in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_UNIX, socket.SOCK_STREAM),
                                 (socket.AF_NETLINK, socket.SOCK_RAW)):
                try:
                    socket.socket(family, kind).sendto(b"x", ("127.0.0.1", {port}))
                except OSError as exc:
                    print(exc.errno)
        """)
        with pytest.raises(TimeoutError):
            listener.recv(64)
    assert namespace_only.stdout.split() == ["101"], namespace_only  # ENETUNREACH
    assert seccomp_only.stdout.split() == ["13", "13", "13"], seccomp_only  # EACCES


# ---------------------------------------------------------------- no other process visible


def test_another_processes_command_line_is_unreadable() -> None:
    marker = f"evolve-marker-{os.getpid()}-{time.monotonic_ns()}"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        deadline = time.monotonic() + 10
        while marker.encode() not in Path(f"/proc/{bystander.pid}/cmdline").read_bytes():  # visible from outside
            assert time.monotonic() < deadline
            time.sleep(0.01)
        outcome = run("read_proc_cmdline", marker)
        assert outcome["found"] == [], outcome
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.skipif(not NAMESPACES, reason="this kernel refuses this user new namespaces")
def test_without_landlock_the_mount_namespace_alone_hides_every_process(tmp_path: Path) -> None:
    hidden = run_python(f"""
        import ctypes, os
        from evolve.sandbox._isolation import enter_namespaces, hide_system, private_folder
        libc = ctypes.CDLL(None, use_errno=True)
        assert enter_namespaces(libc) and private_folder(libc, {str(tmp_path)!r}, 1 << 20, 100, None)
        assert "/proc" in hide_system(libc, 1 << 20, None)
        print(os.listdir("/proc"), os.path.exists("/proc/1/cmdline"), os.path.exists("/proc/self/status"))
    """)
    assert hidden.stdout.split("\n")[0] == "[] False False", hidden
    assert os.path.exists("/proc/1/cmdline")  # only inside its namespace


def test_the_evaluators_arguments_never_appear_in_any_command_line() -> None:
    problem = load_problem("fizzbuzz", ROOT / "programs")
    seen: list[bytes] = []

    async def evaluate_and_watch() -> None:
        task = asyncio.create_task(evaluate_program(problem, SLOW_FIZZBUZZ))
        while not task.done():
            for entry in os.scandir("/proc"):
                try:
                    cmdline = Path(entry.path, "cmdline").read_bytes() if entry.name.isdigit() else b""
                except OSError:
                    continue
                if b"evolve.problems.evaluation" in cmdline or b"_child.py" in cmdline:
                    seen.append(cmdline)
            await asyncio.sleep(0.05)
        assert task.result().ok, task.result()

    asyncio.run(evaluate_and_watch())
    assert seen, "the evaluator process was never seen running"
    assert not [line for line in seen if b"fizzbuzz" in line or b"program.py" in line or b"evolve-" in line], seen


# ---------------------------------------------------------------- total write cap


def test_many_files_each_under_the_per_file_cap_are_stopped_at_the_total_cap() -> None:
    limits = SandboxLimits(wall_time_s=20.0, cpu_time_s=20.0, memory_mb=512, max_written_mb=16)
    started = time.monotonic()
    result = Sandbox(limits).call(HOSTILE / "write_total.py", "solve", 200)  # 800 MiB in 4 MiB files
    assert result.status == "bad_output" and "write cap" in result.detail, result
    assert time.monotonic() - started < limits.wall_time_s  # the cap stopped it, not the wall limit
    assert run("write_total", 2, limits=limits) == 2  # 8 MiB: under the cap


@pytest.mark.skipif(not NAMESPACES, reason="this kernel refuses this user new namespaces")
def test_with_namespaces_the_candidates_folder_is_a_filesystem_of_the_cap_size() -> None:
    limits = SandboxLimits(max_written_mb=16)
    result = Sandbox(limits).call(HOSTILE / "write_total.py", "capacity")
    assert result.status == "ok" and result.value == 16 * 1024 * 1024, result


def test_the_folder_watcher_counts_written_blocks_not_sizes_and_sees_into_locked_folders(tmp_path: Path) -> None:
    folder = tmp_path / "candidate"
    folder.mkdir()
    sparse = folder / "sparse.bin"
    with sparse.open("wb") as handle:
        handle.seek(1 << 30)
        handle.write(b"x")
    locked = folder / "locked"
    locked.mkdir()
    (locked / "data.bin").write_bytes(os.urandom(1 << 20))
    locked.chmod(0)
    used, entries = folder_usage(folder, MAX_FOLDER_ENTRIES)
    assert (1 << 20) <= used < (2 << 20) and entries == 3


# ---------------------------------------------------------------- temporary folders of killed processes


def working_in(folder: Path) -> list[int]:
    """Live processes whose working directory is `folder`."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and os.readlink(f"{entry.path}/cwd").startswith(str(folder)):
                state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
                found += [int(entry.name)] if state != "Z" else []
        except OSError:
            continue
    return found


def start_and_kill(code: str, parent: Path, prefix: str) -> Path:
    """Run `code` in a fresh interpreter whose temporary folder is `parent`; SIGKILL it once a folder whose
    name starts with `prefix` is there, and return that folder."""
    setup = f"import tempfile; tempfile.tempdir = {str(parent)!r}\n"
    process = subprocess.Popen([sys.executable, "-c", setup + code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (folders := [parent / name for name in os.listdir(parent) if name.startswith(prefix)]):
            assert process.poll() is None and time.monotonic() < deadline, "the folder never appeared"
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return folders[0]


def test_a_killed_callers_sandbox_folder_is_removed_by_the_next_sandbox_and_a_live_ones_is_kept(
    sandbox_parent: Path,
) -> None:
    left = start_and_kill(f"""
from evolve.sandbox.core import Sandbox, SandboxLimits
program = {str(HOSTILE / "endless_loop.py")!r}
Sandbox(SandboxLimits(wall_time_s=60, cpu_time_s=60)).call(program, "solve", 1)
""", sandbox_parent, "evolve-sandbox-")
    time.sleep(0.2)
    assert left.is_dir()  # nothing removed it: the caller was killed
    assert not working_in(left)  # but its child died with it
    live = make_owned_folder("evolve-sandbox-")
    here = owner_tag().rsplit(".", 1)[1]
    reused_pid = sandbox_parent / f"evolve-sandbox-{os.getpid()}.1.{here}-x"  # this pid, another start: dead owner
    reused_pid.mkdir()
    elsewhere = sandbox_parent / f"evolve-sandbox-{os.getpid()}.1.1-x"  # another pid namespace: never judged
    elsewhere.mkdir()
    Sandbox(LIMITS)
    assert not left.exists() and not reused_pid.exists()
    assert live.is_dir() and live.name.startswith(f"evolve-sandbox-{owner_tag()}-") and elsewhere.is_dir()
    live.rmdir()
    elsewhere.rmdir()


def test_removing_a_folder_already_gone_leaves_its_parents_mode_alone(sandbox_parent: Path) -> None:
    # two processes clearing the same stale folder: the later one once chmod'ed the parent 0700, which as root
    # is /tmp, and every candidate's uid lost its way to its folder
    sandbox_parent.chmod(0o1777)
    remove_folder(sandbox_parent / "evolve-sandbox-1.1.1-gone")
    assert sandbox_parent.stat().st_mode & 0o7777 == 0o1777


def test_a_folder_the_candidate_locked_inside_and_itself_is_removed_and_its_parent_keeps_its_mode(
        sandbox_parent: Path) -> None:
    sandbox_parent.chmod(0o1777)
    folder = sandbox_parent / "evolve-sandbox-1.1.1-locked"
    (folder / "inner" / "deeper").mkdir(parents=True)
    (folder / "inner" / "deeper" / "file").write_text("x")
    (folder / "file").write_text("x")
    (folder / "inner" / "deeper").chmod(0)
    (folder / "inner").chmod(0o500)
    folder.chmod(0)
    remove_folder(folder)
    assert not folder.exists()
    assert sandbox_parent.stat().st_mode & 0o7777 == 0o1777


def test_a_killed_engines_evaluation_folder_is_removed_at_the_next_evaluation(sandbox_parent: Path) -> None:
    left = start_and_kill(f"""
import asyncio
from evolve.problems.evaluation import evaluate_program
from pathlib import Path
from evolve.problems.problem import load_problem
asyncio.run(evaluate_program(load_problem("fizzbuzz", Path({str(ROOT / "programs")!r})), {SLOW_FIZZBUZZ!r}))
""", sandbox_parent, "evolve-eval-")
    assert left.is_dir()
    foreign = sandbox_parent / "evolve-eval-notours"  # no owner in its name: never touched
    foreign.mkdir()
    evaluation = asyncio.run(evaluate_program(load_problem("fizzbuzz", ROOT / "programs"), "def fizzbuzz(n):\n"
                                                                                           "    return str(n)\n"))
    assert evaluation.ok, evaluation
    assert not left.exists() and foreign.is_dir()
    foreign.rmdir()
