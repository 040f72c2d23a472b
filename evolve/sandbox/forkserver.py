"""The trusted side of a Sandbox's fork server: start it, have it fork a child per call, and stop it.

The server (evolve/sandbox/_forkserver.py, whose docstring gives the protocol) is started like a fresh child:
`python -I -S -B`, the minimal environment, a session of its own, no fd of this process's but its control socket.
It imports the problem's `preload` modules once; each call's child is forked from it and confines itself as a
fresh child does. A server that died (killed, or its control socket broken) is replaced on the next call; when
none can be started, `spawn` returns None and the caller starts a fresh child. The server ends when `stop` is
called, when this process dies (its control socket reaches EOF) or when its parent changes. Before each fork its
state as the kernel shows it from here (every resource limit, its priority, its CPU affinity) is compared with the
state it started with: no child can change it (another uid or user namespace, its own PID namespace, and a seccomp
filter stand in the way), but a server changed anyway is replaced before it forks another child (`replaced`).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

SERVER = Path(__file__).with_name("_forkserver.py")
_START_TIMEOUT_S = 60.0  # the preload (numpy...) on a loaded machine
_REPLY_TIMEOUT_S = 10.0  # a fork, or reaping a child already killed
_CONFIG_CHUNK = 1 << 15  # _forkserver.CONFIG_CHUNK: the config (hundreds of read roots) goes in messages this long


class ForkedChild:
    """A child forked by the server, seen like a subprocess.Popen: pid, stdin, stdout, stderr, returncode.
    Not a child of this process: `reap` asks the server for its exit code and CPU time."""

    def __init__(self, pid: int, pidfd: int, reply: socket.socket, stdin: int, stdout: int, stderr: int,
                 placed: bool = False) -> None:
        self.pid, self.pidfd, self._reply = pid, pidfd, reply
        self.placed = placed  # it started in the run's cgroup (clone3's CLONE_INTO_CGROUP): no cgroup.procs write
        self.stdin = open(stdin, "wb")  # noqa: SIM115 - closed by the RunningChild that owns it
        self.stdout = open(stdout, "rb")  # noqa: SIM115
        self.stderr = open(stderr, "rb")  # noqa: SIM115
        self.returncode: int | None = None
        self.server_lost = False  # the server died before reporting the child's end (the kernel killed the child)

    def reap(self) -> float:
        """Wait for the (killed) child's end; set returncode and return its CPU seconds. Where the server died first,
        the child died with it: SIGKILL, no CPU figure."""
        try:
            self._reply.settimeout(_REPLY_TIMEOUT_S)
            self._reply.sendall(b"r")
            code, cpu_s = _read_line(self._reply).split()
            self.returncode = int(code)
            return float(cpu_s)
        except (OSError, ValueError):
            self.server_lost = True
            self.returncode = -9
            return 0.0
        finally:
            self._reply.close()


class ForkServer:
    """One server for one Sandbox: forks children that start from the state after importing `preload`. As root each
    child is forked as the init of a PID namespace of its own (it then forks only the candidate's process); with
    `pid_namespaces` False, or where the kernel refuses, children are plain forks that make their own namespace."""

    pid_namespaces = True  # read when a server starts
    clone3 = True  # the same: clone each child straight into its run's cgroup v2 where the kernel can

    def __init__(self, site_dirs: Sequence[str], preload: Sequence[str], hidden: Sequence[str],
                 read_roots: Sequence[str], list_roots: Sequence[str], environment: dict[str, str]) -> None:
        self._settings = {"site_dirs": list(site_dirs), "preload": list(preload), "hidden": sorted(hidden),
                          "read_roots": list(read_roots), "list_roots": list(list_roots)}
        self._environment = environment
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self.failed_to_start = ""  # why the last start failed; then every call gets a fresh child
        self.starts = 0  # servers started so far
        self.forks = 0  # children forked so far
        self.placed = 0  # of which the kernel started in their run's cgroup v2 (clone3)
        self.replaced = 0  # servers replaced because their limits, priority or affinity had changed
        self._fingerprint: tuple[object, ...] | None = None

    @property
    def _config(self) -> bytes:
        """What a starting server is sent (_forkserver.receive_config)."""
        return json.dumps({**self._settings, "pid_namespace": self.pid_namespaces, "clone3": self.clone3}).encode()

    @property
    def pid(self) -> int | None:
        """The running server's pid (None before the first call and after stop)."""
        return self._process.pid if self._process is not None else None

    def spawn(self, workdir: Path, environment: dict[str, str], result_write: int, request_read: int,
              cgroup: Path | None = None) -> ForkedChild | None:
        """A child forked for one call (its stdin awaiting the job), or None when no server can fork it. `cgroup`:
        the run's cgroup v2 folder, which the child starts in where the kernel can (ForkedChild.placed)."""
        try:
            folder = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if cgroup is not None else -1
        except OSError:
            folder = -1
        try:
            return self._spawn(workdir, environment, result_write, request_read, folder)
        finally:
            if folder >= 0:
                os.close(folder)

    def _spawn(self, workdir: Path, environment: dict[str, str], result_write: int, request_read: int,
               cgroup: int) -> ForkedChild | None:
        for _ in range(2):  # a dead server is replaced once per call
            with self._lock:
                control = self._running()
                if control is None:
                    return None
                reply, reply_there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
                theirs = [reply_there.fileno(), pipes[0][0], pipes[1][1], pipes[2][1], result_write]
                theirs += [request_read] if request_read >= 0 else []
                theirs += [cgroup] if cgroup >= 0 else []
                header = json.dumps({"workdir": str(workdir), "environment": environment,
                                     "session": request_read >= 0, "cgroup": cgroup >= 0}).encode()
                try:
                    socket.send_fds(control, [header], theirs)
                    sent = True
                except OSError:
                    sent = False
            reply_there.close()
            for fd in (pipes[0][0], pipes[1][1], pipes[2][1]):
                os.close(fd)
            mine = (pipes[0][1], pipes[1][0], pipes[2][0])
            child = self._forked(reply, mine) if sent else None
            if child is not None:
                self.forks += 1
                self.placed += child.placed
                return child
            reply.close()
            for fd in mine:
                os.close(fd)
            self._discard(control)
        return None

    def _forked(self, reply: socket.socket, mine: tuple[int, int, int]) -> ForkedChild | None:
        try:
            reply.settimeout(_REPLY_TIMEOUT_S)
            pid, placed = _read_line(reply).split()
            pidfd = os.pidfd_open(int(pid))
        except (OSError, ValueError):  # the server died (and the child, if any, with it)
            return None
        return ForkedChild(int(pid), pidfd, reply, *mine, placed=placed == "1")

    def _running(self) -> socket.socket | None:
        """The live server's control socket, starting one if there is none; None if it cannot start."""
        if self._process is not None and self._process.poll() is None and self._control is not None:
            if process_state(self._process.pid) == self._fingerprint:
                return self._control
            self.replaced += 1
        self._stop_locked()
        if self.failed_to_start:
            return None
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(SERVER), str(theirs.fileno())], cwd="/", env=self._environment,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError as exc:
            self.failed_to_start = f"the fork server did not start: {exc}"
            print(f"sandbox: {self.failed_to_start}; each call starts a fresh child", file=sys.stderr, flush=True)
            control.close()
            return None
        finally:
            theirs.close()
        self._control = control
        self.starts += 1
        config = self._config
        try:
            control.settimeout(_START_TIMEOUT_S)
            control.send(str(len(config)).encode())
            for start in range(0, len(config), _CONFIG_CHUNK):
                control.send(config[start:start + _CONFIG_CHUNK])
            ready = json.loads(control.recv(1 << 16) or b"{}")
            control.settimeout(None)
        except (OSError, ValueError) as exc:
            ready = {"ready": False, "detail": f"no answer ({exc})"}
        if ready.get("ready") is not True:
            self.failed_to_start = f"the fork server did not start: {ready.get('detail', 'it exited')}"
            print(f"sandbox: {self.failed_to_start}; each call starts a fresh child (slower, as safe)",
                  file=sys.stderr, flush=True)
            self._stop_locked()
            return None
        self._fingerprint = process_state(self._process.pid)
        return control

    def _discard(self, control: socket.socket) -> None:
        with self._lock:
            if self._control is control:
                self._stop_locked()

    def stop(self) -> None:
        """End the server (its children die with it); the next spawn starts another."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None


_LIMITS = tuple(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))


def process_state(pid: int) -> tuple[object, ...]:
    """What a hostile process of the same uid could once change about another: every resource limit, the
    priority and the CPU affinity, as read from here (or the error reading them gave)."""
    state: list[object] = []
    for read in ([lambda limit=limit: resource.prlimit(pid, limit) for limit in _LIMITS]
                 + [lambda: os.getpriority(os.PRIO_PROCESS, pid), lambda: sorted(os.sched_getaffinity(pid))]):
        try:
            state.append(read())
        except OSError as exc:
            state.append(exc.errno)
    return tuple(state)


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            raise ConnectionError("the fork server closed the socket")
        data += chunk
    return data.decode()
