"""Runs an untrusted candidate program in a confined child process and returns its JSON output.

The child is a fresh `python -I -S -B` running evolve/_sandbox_child.py in a session and process group
of its own, with a minimal environment (PATH, LANG, one BLAS thread; HOME and TMPDIR = its own temporary
working directory, removed afterwards) and nothing of the caller's but its arguments. The job (payload
included) goes in on stdin; the result comes back as one JSON line on a private pipe, so what the
candidate prints cannot corrupt it. Layers, each effective on its own (Linux only):

- rlimits, set by the harness before any candidate code runs: CPU seconds (SIGXCPU, SIGKILL a second
  later), address space (memory; numpy still imports at 128 MB), file size, no core dumps.
- a cgroup per run, nested under the caller's, where the caller may write one (root here and on CI:
  cgroup v1 pids; a delegated cgroup v2 tree): every process of the run, setsid daemons included, is
  found and killed at the end; with the pids controller, pids.max also caps their number.
- an unused uid, as root, whenever the interpreter, its packages, the harness and the temporary
  directory are reachable by any uid (not here: the interpreter is under a private /root): the
  child runs as a random unused uid owning only its directory, so ordinary file permissions also
  guard the system, RLIMIT_NPROC (which does not bind root) caps its processes, and without a
  cgroup every process of that uid is killed at the end.
- a normal user gets RLIMIT_NPROC above its current count; there, without a cgroup, a setsid daemon
  can outlive the run. Root with neither a cgroup nor the unused uid has only the process group and
  the wall clock.
- Landlock (Linux >= 5.13, ABI read at run time; 7 on this kernel): writes only inside its directory,
  reads only of the interpreter, its packages and system directories (not the project, the evaluator
  or any expected answer), no TCP (ABI >= 4), no signals to processes outside (ABI >= 6). Without
  Landlock only the unused uid above (when used) stops writes outside.
- as root without the unused uid, the harness drops every capability but keeps uid 0 (so a private
  /root interpreter stays readable): the candidate cannot raise its rlimits, mount, load modules...
- in the parent: a wall-clock deadline, a cap on stdout + stderr + result read incrementally, and
  SIGKILL to the process group (and cgroup or uid) at the end, in every case.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SandboxStatus = Literal["ok", "timeout", "memory", "crash", "bad_output"]
_FAILURES = ("timeout", "memory", "crash", "bad_output")
_HARNESS = Path(__file__).with_name("_sandbox_child.py")
_SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/dev", "/proc", "/sys", "/etc/ld.so.cache",
                      "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types")
_MAX_FILE_BYTES = 64 * 1024 * 1024
_SPARE_UIDS = (1_000_000, 1_000_000_000)  # a run's own uid is drawn from here (root without cgroups)


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mb: int = 1024  # address-space cap of the child
    max_processes: int = 64  # processes and threads at once; fork bombs die
    max_output_bytes: int = 1_000_000  # stdout + stderr + result; past it the run is bad_output


@dataclass(frozen=True)
class SandboxResult:
    status: SandboxStatus
    value: Any = None  # JSON-decoded return value when status == "ok"
    detail: str = ""  # one-line reason when not ok
    stdout: str = ""  # at most max_output_bytes
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


def _others_can_read(path: str | Path, mode: int = stat.S_IROTH) -> bool:
    """Whether any uid can reach `path` (every parent directory searchable by others) and has `mode` on it."""
    try:
        current = Path(path).resolve()
        if not os.stat(current).st_mode & mode:
            return False
        return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in current.parents)
    except OSError:
        return False


def _mapped_ids(map_path: str) -> list[range]:
    try:
        lines = Path(map_path).read_text().split("\n")
    except OSError:
        return []
    return [range(int(f[0]), int(f[0]) + int(f[2])) for f in (line.split() for line in lines) if len(f) == 3]


def _spare_uid() -> int | None:
    """A random uid (used as gid too) that this user namespace maps and nothing is likely to use."""
    maps = _mapped_ids("/proc/self/uid_map"), _mapped_ids("/proc/self/gid_map")
    for _ in range(20):
        uid = _SPARE_UIDS[0] + secrets.randbelow(_SPARE_UIDS[1] - _SPARE_UIDS[0])
        if all(any(uid in ids for ids in ranges) for ranges in maps):
            return uid
    return None


def _processes() -> list[tuple[int, int, str]]:
    """(pid, real uid, state) of every process."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = dict(line.split(":", 1) for line in Path(entry.path, "status").read_text().splitlines())
                found.append((int(entry.name), int(fields["Uid"].split()[0]), fields["State"].split()[0]))
            except (OSError, KeyError, ValueError, IndexError):
                continue
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` until none is left (its RLIMIT_NPROC keeps that finite)."""
    for _ in range(200):
        living = [pid for pid, owner, state in _processes() if owner == uid and state != "Z"]
        if not living:
            return
        _kill(living)
        time.sleep(0.002)


def _cgroup_parents() -> list[Path]:
    """Where a run's cgroup may go, best first: under this process's own pids cgroup (v1), then its
    cgroup v2 (pure, or the hybrid layout's "unified" tree)."""
    parents = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "pids" in controllers.split(","):
            parents.insert(0, Path("/sys/fs/cgroup/pids", where.lstrip("/")))
        elif controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (root / "cgroup.controllers").exists():
                    parents.append(root / where.lstrip("/"))
    return parents


class _RunCgroup:
    """A cgroup for one run, nested under the caller's own: it finds (and kills) every process of the
    run, setsid or not; where the pids controller is available (`capped`), it also caps their number."""

    def __init__(self, path: Path, capped: bool) -> None:
        self.path = path
        self.capped = capped

    @classmethod
    def create(cls, parents: list[Path], max_processes: int) -> _RunCgroup | None:
        for parent in parents:
            if not os.access(parent, os.W_OK):
                continue
            cls._remove_stale(parent)
            path = parent / f"evolve-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_processes))
                return cls(path, capped=True)
            except OSError:
                if (parent / "cgroup.controllers").exists():  # v2 without the pids controller: tracks, no cap
                    return cls(path, capped=False)
                cls(path, capped=False).kill_all_and_remove()
        return None

    @classmethod
    def _remove_stale(cls, parent: Path) -> None:
        """Empty the cgroups of runs whose process died without cleaning up (killed with SIGKILL)."""
        for entry in parent.glob("evolve-sandbox-*-*"):
            owner = entry.name.split("-")[2]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                cls(entry, capped=False).kill_all_and_remove()

    def add(self, pid: int) -> bool:
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def pids(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        kill_file = self.path / "cgroup.kill"  # cgroup v2, Linux >= 5.14: atomic
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        for _ in range(500):  # v1: kill what is there until nothing is left; pids.max bounds the refills
            pids = self.pids()
            if not pids:
                return
            _kill(pids)
            time.sleep(0.001)

    def kill_all_and_remove(self) -> None:
        self.kill_all()
        for _ in range(200):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.005)


class Sandbox:
    """Runs candidate code in a child process under `limits`; safe to use from several threads."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self._site_dirs = tuple(path for path in site.getsitepackages() if os.path.isdir(path))
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *self._site_dirs}
        self._read_roots = tuple(sorted(root for root in prefixes | set(_SYSTEM_READ_ROOTS) if os.path.exists(root)))
        self._root = os.geteuid() == 0
        needed = (sys.executable, os.path.dirname(os.__file__), str(_HARNESS), *self._site_dirs)
        self._others_can_run = self._root and all(_others_can_read(path) for path in needed)

    def call(self, program_path: str | Path, function: str, *args: Any) -> SandboxResult:
        """Import the candidate in a fresh child process and return function(*args) (JSON in, JSON out)."""
        return self._run("call", Path(program_path), function, list(args))

    def run_driver(self, program_path: str | Path, driver_path: str | Path, payload: Any) -> SandboxResult:
        """In the child: import the candidate as module "candidate", import the trusted driver file (before
        the confinement, so it may read files beside it), and return driver.drive(candidate_module, payload)."""
        return self._run("driver", Path(program_path), str(Path(driver_path).resolve()), payload)

    def _cgroup_parents(self) -> list[Path]:
        return _cgroup_parents()

    def _run(self, mode: str, program_path: Path, target: str, payload: Any) -> SandboxResult:
        started = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="evolve-sandbox-"))
        cgroup: _RunCgroup | None = None
        process: subprocess.Popen[bytes] | None = None
        uid = None
        result_read = -1
        try:
            program = workdir / "candidate.py"
            shutil.copyfile(program_path, program)
            cgroup = _RunCgroup.create(self._cgroup_parents(), self.limits.max_processes)
            if self._root and self._others_can_run and _others_can_read(workdir.parent, stat.S_IXOTH):
                uid = _spare_uid()
            if uid is not None:
                os.chown(workdir, uid, uid)
                os.chown(program, uid, uid)
            job = self._job(mode, program, target, payload, workdir, uid)
            result_read, result_write = os.pipe()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", str(_HARNESS), str(result_write)], cwd=workdir,
                    env=self._environment(workdir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, pass_fds=(result_write,), start_new_session=True,
                )
            finally:
                os.close(result_write)
            if cgroup is not None and not cgroup.add(process.pid):  # meanwhile the child starts its interpreter
                cgroup.kill_all_and_remove()
                cgroup = None
            assert process.stdin is not None
            try:
                process.stdin.write(job)  # the child waits for this before it runs anything of the candidate's
                process.stdin.close()
            except BrokenPipeError:
                pass
            return self._supervise(process, result_read, started, cgroup, uid)
        finally:
            if process is not None and process.returncode is None:
                self._stop(process, cgroup, uid)
                process.wait()
            if cgroup is not None:
                cgroup.kill_all_and_remove()
            if result_read >= 0:
                os.close(result_read)
            shutil.rmtree(workdir, ignore_errors=True)

    def _job(self, mode: str, program: Path, target: str, payload: Any, workdir: Path, uid: int | None) -> bytes:
        limits = self.limits
        if uid is not None:
            nproc: int | None = limits.max_processes
        elif self._root:
            nproc = None  # RLIMIT_NPROC does not bind root; the cgroup (if any) caps the processes
        else:  # RLIMIT_NPROC counts every process of this user
            nproc = limits.max_processes + sum(1 for _, owner, _ in _processes() if owner == os.getuid())
        return json.dumps({
            "mode": mode, "program": str(program), "target": target, "payload": payload,
            "workdir": str(workdir), "site_dirs": list(self._site_dirs), "read_roots": list(self._read_roots),
            "uid": uid, "limits": {
                "cpu_s": max(1, int(limits.cpu_time_s + 0.999)), "memory_bytes": limits.memory_mb * 1024 * 1024,
                "file_bytes": _MAX_FILE_BYTES, "nproc": nproc,
            },
        }).encode()

    @staticmethod
    def _environment(workdir: Path) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        }

    @staticmethod
    def _stop(process: subprocess.Popen[bytes], cgroup: _RunCgroup | None, uid: int | None) -> None:
        """SIGKILL the child's whole process group (before it is reaped, so the group id is still
        ours), then every process in its cgroup or, failing that, every process of its uid."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill_all()
        elif uid is not None:
            _kill_uid(uid)

    def _supervise(self, process: subprocess.Popen[bytes], result_read: int, started: float,
                   cgroup: _RunCgroup | None, uid: int | None) -> SandboxResult:
        limits = self.limits
        assert process.stdout is not None and process.stderr is not None
        streams = {"stdout": bytearray(), "stderr": bytearray(), "result": bytearray()}
        pidfd = os.pidfd_open(process.pid)
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ, "stdout")
                selector.register(process.stderr, selectors.EVENT_READ, "stderr")
                selector.register(result_read, selectors.EVENT_READ, "result")
                selector.register(pidfd, selectors.EVENT_READ, "exit")
                outcome = _read_until(selector, streams, started + limits.wall_time_s, limits.max_output_bytes)
                self._stop(process, cgroup, uid)
                selector.unregister(pidfd)
                if outcome == "exit":  # what is still in the pipes, now that every writer is dead
                    drained = _read_until(selector, streams, time.monotonic() + 0.1, limits.max_output_bytes)
                    outcome = "overflow" if drained == "overflow" else "exit"
        finally:
            os.close(pidfd)
        _, wait_status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(wait_status)
        process.stdout.close()
        process.stderr.close()
        stdout, stderr = (bytes(streams[name]).decode(errors="replace") for name in ("stdout", "stderr"))

        def result(status: SandboxStatus, detail: str = "", value: Any = None) -> SandboxResult:
            return SandboxResult(status, value, detail, stdout, stderr, time.monotonic() - started)

        if outcome == "timeout":
            return result("timeout", f"wall-clock limit of {limits.wall_time_s:g}s exceeded")
        if outcome == "overflow":
            return result("bad_output", f"output over the {limits.max_output_bytes}-byte cap")
        message = _parse_result(bytes(streams["result"]))
        if message is not None:
            if message.get("ok") is True:
                return result("ok", value=message.get("value"))
            kind = message.get("kind")
            return result(kind if kind in _FAILURES else "crash", str(message.get("detail", ""))[:500])
        returncode = process.returncode
        if returncode < 0:
            name = _signal_name(-returncode)
            if -returncode == signal.SIGXCPU or usage.ru_utime + usage.ru_stime >= limits.cpu_time_s:
                return result("timeout", f"CPU limit of {limits.cpu_time_s:g}s exceeded ({name})")
            return result("crash", f"killed by {name}")
        if "MemoryError" in stderr or "memory allocation" in stderr.lower():  # e.g. OpenBLAS at import
            return result("memory", "memory allocation failed")
        return result("crash", f"exit code {returncode} without a result")


def _read_until(selector: selectors.BaseSelector, streams: dict[str, bytearray], deadline: float, cap: int) -> str:
    """Read the pipes into `streams` until the child exits (its pidfd is readable) or, once that is no
    longer watched, every pipe is closed: "exit"; or until the deadline ("timeout") or the cap ("overflow")."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        if not selector.get_map():
            return "exit"
        for key, _ in selector.select(timeout=remaining):
            if key.data == "exit":
                return "exit"
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                selector.unregister(key.fileobj)
                continue
            room = cap - sum(len(buffer) for buffer in streams.values())
            streams[key.data].extend(chunk[:room])
            if len(chunk) > room:
                return "overflow"


def _parse_result(raw: bytes) -> dict[str, Any] | None:
    for line in reversed(raw.decode(errors="replace").splitlines()):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            return message
    return None
