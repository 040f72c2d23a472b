"""Runs an untrusted candidate program in a confined child process and returns its JSON output.

Layers, each effective on its own:
- a fresh `python -I -B` child in its own session and process group, stdin closed, a minimal
  environment, its own temporary working directory (removed afterwards);
- rlimits: CPU seconds, address space (memory), file size, no core dumps;
- a process cap: a pids cgroup of its own where the cgroup tree is writable (as root here), which
  also finds every process it made, even one that left the process group with setsid; elsewhere
  RLIMIT_NPROC above the user's current count (it does not bind root) and the process group;
- Landlock (Linux >= 5.13) in the child before the candidate is imported: no file write outside
  its directory, no read of anything but the interpreter, its packages and the system (so not the
  problem's evaluator or any expected answer), no TCP, and (ABI >= 6) no signal to any process
  outside the sandbox;
- a wall-clock deadline in the parent, an output cap (stdout + stderr), and SIGKILL to the whole
  group at the end in every case.
The result travels on a private pipe, so whatever the candidate prints cannot forge it.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SandboxStatus = Literal["ok", "timeout", "memory", "crash", "bad_output"]
_HARNESS = Path(__file__).with_name("_sandbox_child.py")
_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))  # cgroup v1, v2


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 64
    max_output_bytes: int = 1_000_000


@dataclass(frozen=True)
class SandboxResult:
    status: SandboxStatus
    value: Any = None
    detail: str = ""
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        try:
            count += entry.name.isdigit() and entry.stat().st_uid == uid
        except OSError:
            continue
    return count


class _PidsCgroup:
    """A pids cgroup for one sandboxed run: caps its process count and lists every process in it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_processes: int) -> _PidsCgroup | None:
        for root in _CGROUP_ROOTS:
            if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
                continue
            path = root / f"evolve-sandbox-{secrets.token_hex(6)}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(max_processes))
                return cls(path)
            except OSError:
                shutil.rmtree(path, ignore_errors=True)
                try:
                    path.rmdir()
                except OSError:
                    pass
        return None

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all_and_remove(self) -> None:
        if not self.path.exists():
            return
        for _ in range(200):  # a fork loop may still be making processes while we kill them
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.01)


class Sandbox:
    """Runs candidate code in a child process under `limits`; safe to use from several threads."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()

    def call(self, program_path: str | Path, function: str, *args: Any) -> SandboxResult:
        """Return function(*args) computed by the candidate in a child process (JSON in, JSON out)."""
        return self._run("call", Path(program_path), function, list(args))

    def run_driver(self, program_path: str | Path, driver_path: str | Path, payload: Any) -> SandboxResult:
        """Return driver.drive(candidate_module, payload), computed in the child with the candidate loaded."""
        return self._run("driver", Path(program_path), str(Path(driver_path).resolve()), payload)

    def _run(self, mode: str, program_path: Path, target: str, payload: Any) -> SandboxResult:
        workdir = Path(tempfile.mkdtemp(prefix="evolve-sandbox-"))
        cgroup = _PidsCgroup.create(self.limits.max_processes)
        try:
            program_copy = workdir / "candidate.py"
            shutil.copyfile(program_path, program_copy)
            input_path = workdir / "input.json"
            input_path.write_text(json.dumps(payload))
            return self._supervise(mode, program_copy, target, input_path, workdir, cgroup)
        finally:
            if cgroup is not None:
                cgroup.kill_all_and_remove()
            shutil.rmtree(workdir, ignore_errors=True)

    def _preexec(self, cgroup: _PidsCgroup | None) -> Any:
        limits = self.limits
        # RLIMIT_NPROC counts all of this user's processes: leave room above the current ones
        nproc = limits.max_processes + _user_process_count()

        def confine() -> None:
            cpu = max(1, int(limits.cpu_time_s + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            memory = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024 * 1024, 64 * 1024 * 1024))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if cgroup is not None:
                cgroup.join()

        return confine

    def _supervise(
        self, mode: str, program: Path, target: str, input_path: Path, workdir: Path,
        cgroup: _PidsCgroup | None,
    ) -> SandboxResult:
        limits = self.limits
        result_read, result_write = os.pipe()
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(workdir),
            "TMPDIR": str(workdir),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        argv = [sys.executable, "-I", "-B", str(_HARNESS), str(result_write), mode, str(program), target,
                str(input_path)]
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(result_write,), start_new_session=True,
                preexec_fn=self._preexec(cgroup),
            )
        finally:
            os.close(result_write)
        streams = {"stdout": bytearray(), "stderr": bytearray(), "result": bytearray()}
        overflow = timed_out = False
        with selectors.DefaultSelector() as selector:
            assert process.stdout is not None and process.stderr is not None
            selector.register(process.stdout, selectors.EVENT_READ, "stdout")
            selector.register(process.stderr, selectors.EVENT_READ, "stderr")
            selector.register(result_read, selectors.EVENT_READ, "result")
            deadline = started + limits.wall_time_s
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                # once the child itself has exited, stop waiting for pipes its descendants hold
                exited = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                events = selector.select(timeout=0 if exited else min(remaining, 0.2))
                for key, _ in events:
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    streams[key.data].extend(chunk)
                if sum(len(buffer) for buffer in streams.values()) > limits.max_output_bytes:
                    overflow = True
                    break
                if exited and not events:
                    break
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill_all_and_remove()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = returncode = os.waitstatus_to_exitcode(status)
        cpu_used = usage.ru_utime + usage.ru_stime
        os.close(result_read)
        process.stdout.close()
        process.stderr.close()
        elapsed = time.monotonic() - started
        cap = limits.max_output_bytes
        stdout = bytes(streams["stdout"][:cap]).decode(errors="replace")
        stderr = bytes(streams["stderr"][:cap]).decode(errors="replace")

        def result(status: SandboxStatus, detail: str = "", value: Any = None) -> SandboxResult:
            return SandboxResult(status, value, detail, stdout[-4000:], stderr[-4000:], elapsed)

        if timed_out:
            return result("timeout", f"wall-clock limit of {limits.wall_time_s:g}s exceeded")
        if overflow:
            return result("bad_output", f"output over the {cap} byte cap")
        message = _parse_result(bytes(streams["result"]))
        if message is not None:
            if message.get("ok"):
                return result("ok", value=message.get("value"))
            return result(message.get("kind", "crash"), str(message.get("detail", "")))
        if returncode < 0:
            name = _signal_name(-returncode)
            if -returncode == signal.SIGXCPU or cpu_used >= limits.cpu_time_s:
                return result("timeout", f"CPU limit of {limits.cpu_time_s:g}s exceeded ({name})")
            return result("crash", f"killed by {name}")
        if "MemoryError" in stderr:
            return result("memory", "MemoryError")
        return result("crash", f"exited with code {returncode} without a result")


def _parse_result(raw: bytes) -> dict[str, Any] | None:
    for line in reversed(raw.decode(errors="replace").splitlines()):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            return message
    return None
