"""The fork server: a long-lived process that imports what a problem preloads and forks one sandbox child per call.

Started by evolve/sandbox/forkserver.py as `python -I -S -B _forkserver.py CONTROL_FD`, exactly as a fresh child is
started (same flags, minimal environment, a session of its own, /dev/null on 0-2, no other fd of the caller's).
It never reads a job and never runs candidate code: each forked child takes its own pipes, sets up its session,
folder and environment, then runs the harness (_child.serve), which confines it exactly as it confines a fresh
child before anything of the candidate's runs. Each child starts from this process's state after the preload,
which no child can change (fork copies it), so nothing of one candidate's reaches the next.
Protocol on CONTROL_FD (a SOCK_SEQPACKET socket):
- first the config: a message holding its length in bytes (ASCII digits), then the config itself in messages of
  at most CONFIG_CHUNK bytes (a list of read roots can exceed what one message may hold), JSON {"site_dirs",
  "preload", "hidden", "read_roots", "list_roots", "pid_namespace", "clone3"}; answer: JSON
  {"ready": true, "failed": [names that did not import]} or {"ready": false, "detail": ...} when a preloaded
  module came from a hidden path (an answer package), which a child could then read from memory, started a
  thread (a child would lack it, and inherit whatever lock it held) or left memory mapped shared (which every
  child would share, not copy: one candidate could leave state there for the next); the Sandbox then starts
  fresh children. It then opens
  the read roots once: each child's Landlock rules use these fds, and the child closes them before the candidate
  runs (hundreds of opens and stats were most of a child's confinement); a child's job leaves the lists of read
  roots out, and the child takes this process's.
- then one message per call: JSON {"workdir", "environment", "session", "cgroup"} with the fds [reply socket,
  stdin read end, stdout write end, stderr write end, result write end, (request read end), (with "cgroup": the
  run's cgroup v2 folder)]. The server forks (_clone.py: as root and with "pid_namespace", the child as the init
  of a PID namespace of its own, which then forks only the candidate's process, pid 2, and hands pid 2's wait
  status back on a pipe, STATUS_FD, so that it ends as pid 2 did; with "clone3" and a cgroup, straight into that
  cgroup where the kernel can) and writes "PID PLACED\\n" on the reply socket (PLACED: 1 where the child started in
  the cgroup, else 0 and the supervisor puts it there); once the supervisor writes on it (or closes it) and the
  child has exited, it reaps the child and writes "EXIT_CODE CPU_SECONDS\\n". Until then the child stays a
  zombie, so its pid and process group are not reused while the supervisor may still signal them.
- EOF on CONTROL_FD (the Sandbox closed, or its process died) or a new parent: the server exits, and the kernel
  kills its children, whose parent-death signal is tied to it.
Standard library only.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import selectors
import socket
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this file's folder off sys.path
import _child  # type: ignore[import-not-found]  # noqa: E402
import _clone  # type: ignore[import-not-found]  # noqa: E402
import _isolation  # type: ignore[import-not-found]  # noqa: E402

del sys.path[0]

_HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
_FIRST_FREE_FD = 100  # received fds are moved above the child's fds 0-4 before being put in place
_FIRST_KEPT_FD = 16  # the read roots' fds, kept open for the children, lie above their fds 0-4
STATUS_FD = 15  # in a child forked as its PID namespace's init: the pipe for pid 2's wait status
_MAX_MESSAGE = 1 << 16
CONFIG_CHUNK = 1 << 15


@dataclass
class Forked:
    """A child of this server: its pidfd, the supervisor's reply socket, whether it exited and may be reaped."""
    pid: int
    pidfd: int
    reply: socket.socket
    status_read: int = -1  # where the child is its PID namespace's init: pid 2's wait status comes here
    exited: bool = False
    reap_wanted: bool = False


def preload(names: list[str], hidden: list[str]) -> dict:
    """Import each module (one that fails to import is left to the candidate's own import); the ready message."""
    failed = []
    for name in names:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - the candidate's import reports it as it would without a preload
            failed.append(name)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and any(path == root or path.startswith(root.rstrip("/") + "/") for root in hidden):
            return {"ready": False, "detail": f"preloading imported {name} from a hidden path"}
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:  # a forked child has only the forking thread, and any lock another thread held stays held
        return {"ready": False, "detail": f"preloading started {threads - 1} thread(s)"}
    shared = shared_mappings()
    if shared:
        return {"ready": False, "detail": f"preloading left memory every child would share: {shared[0]}"}
    return {"ready": True, "failed": failed}


def shared_mappings(maps: str = "/proc/self/maps") -> list[str]:
    """This process's memory that a forked child would share rather than copy, and could write for the next
    child to read: shared mappings that are writable or not backed by a file (anonymous memory, deleted files)."""
    found = []
    with open(maps) as handle:
        for line in handle:
            fields = line.split(maxsplit=5)
            if len(fields) < 2 or fields[1][3:4] != "s":
                continue
            backing = fields[5].strip() if len(fields) > 5 else ""
            if fields[1][1] == "w" or not backing.startswith("/") or backing.endswith("(deleted)"):
                found.append(f"{fields[0]} {fields[1]} {backing or 'anonymous'}")
    return found


def become_child(parent: int, header: dict, fds: list[int], libc: ctypes.CDLL, opened: dict[str, tuple[int, bool]],
                 roots: tuple[list[str], list[str]], status_write: int | None) -> None:
    """In the forked process: take the call's fds, session, folder and environment, then run the harness, which
    confines this process before the candidate's code runs. Never returns into the server's loop.
    `parent`: the server's pid as this process sees it (0 from the init of a PID namespace of its own, which gets
    `status_write` too)."""
    try:
        _isolation.die_with_parent(libc, parent)  # again after the harness drops to another uid
        os.setsid()
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, _FIRST_FREE_FD) for fd in fds[1:]]
        for target, fd in enumerate(moved):
            os.dup2(fd, target)
        kept = [fd for fd, _ in opened.values()]
        if status_write is not None:
            os.dup2(status_write, STATUS_FD)
            kept.append(STATUS_FD)
        low = len(moved)  # close all but the read roots: the control socket, other calls' sockets and pidfds...
        for fd in sorted(kept):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        os.chdir(header["workdir"])
        os.environ.clear()
        os.environ.update(header["environment"])
        if "tempfile" in sys.modules:
            sys.modules["tempfile"].tempdir = None  # type: ignore[attr-defined]
        if "numpy.random" in sys.modules:  # numpy keeps the seed drawn at import: each child draws its own
            sys.modules["numpy.random"].seed()
        sys.argv = [_HARNESS, "3", "4"] if header["session"] else [_HARNESS, "3"]
        _child.serve(3, 4 if header["session"] else None, opened, None if status_write is None else STATUS_FD, roots)
    except BaseException as exc:  # noqa: BLE001 - reported on the child's stderr; the supervisor sees no result
        _child.print_traceback(exc)
    finally:
        os._exit(1)


def start(control: socket.socket, selector: selectors.BaseSelector, children: dict[int, Forked], libc: ctypes.CDLL,
          opened: dict[str, tuple[int, bool]], roots: tuple[list[str], list[str]], forker: _clone.Forker) -> bool:
    """Fork a child for the next call on the control socket (as root, as the init of a PID namespace of its own;
    with a cgroup v2 fd, into that cgroup where the kernel can: _clone.py); False on EOF."""
    message, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE, 8)
    if not message:
        return False
    header = json.loads(message)
    cgroup = fds.pop() if header.get("cgroup") and fds else -1
    if len(fds) < 5:
        for fd in (*fds, cgroup):
            if fd >= 0:
                os.close(fd)
        return True
    server = os.getpid()
    status_read, status_write = os.pipe() if forker.own_namespace >= 0 else (-1, -1)
    pid, in_namespace, placed = forker.fork_child(cgroup)
    if pid == 0:
        become_child(0 if in_namespace else server, header, fds, libc, opened, roots,
                     status_write if in_namespace else None)
    reply = socket.socket(fileno=fds[0])
    for fd in (*fds[1:], status_write, cgroup):
        if fd >= 0:
            os.close(fd)
    if status_read >= 0 and not in_namespace:
        os.close(status_read)
        status_read = -1
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = -1
    child = Forked(pid, pidfd, reply, status_read)
    children[pid] = child
    try:
        reply.sendall(f"{pid} {int(placed)}\n".encode())
    except OSError:
        child.reap_wanted = True
    selector.register(reply, selectors.EVENT_READ, ("reply", pid))
    if pidfd >= 0:
        selector.register(pidfd, selectors.EVENT_READ, ("exit", pid))
    else:
        child.exited = True
    return True


def finish(child: Forked, selector: selectors.BaseSelector, children: dict[int, Forked]) -> None:
    """Reap an exited child whose reaping the supervisor asked for; send it its exit code and CPU time (a PID
    namespace's init ends as its pid 2 did, whose wait status it wrote; without one, it was killed first)."""
    _, status, usage = os.wait4(child.pid, 0)
    if child.status_read >= 0:
        os.set_blocking(child.status_read, False)  # its only writer, the init, has exited: never waits
        try:
            reported = os.read(child.status_read, 64)
        except OSError:
            reported = b""
        os.close(child.status_read)
        if reported.isdigit():
            status = int(reported)
    try:
        child.reply.sendall(f"{os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime}\n".encode())
    except OSError:
        pass
    for key in list(selector.get_map().values()):
        if key.data in (("reply", child.pid), ("exit", child.pid)):
            selector.unregister(key.fileobj)
    child.reply.close()
    if child.pidfd >= 0:
        os.close(child.pidfd)
    del children[child.pid]


def serve_forever(control: socket.socket, opened: dict[str, tuple[int, bool]], roots: tuple[list[str], list[str]],
                  forker: _clone.Forker) -> None:
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    children: dict[int, Forked] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, ("control", 0))
    while True:
        events = selector.select(timeout=1.0)
        if os.getppid() != parent:
            return
        for key, _ in events:
            kind, pid = key.data
            if kind == "control":
                if not start(control, selector, children, libc, opened, roots, forker):
                    return
                continue
            child = children.get(pid)
            if child is None:
                continue
            if kind == "exit":
                child.exited = True
                selector.unregister(key.fileobj)
            else:
                try:
                    wanted = child.reply.recv(64)
                except OSError:
                    wanted = b""
                child.reap_wanted = True
                if not wanted:
                    selector.unregister(key.fileobj)
            if child.exited and child.reap_wanted:
                finish(child, selector, children)


def own_pid_namespace(wanted: bool) -> int:
    """An fd of this process's PID namespace where it may fork children into namespaces of their own (root, and
    `wanted`: the Sandbox's config may ask for plain forks), else -1."""
    if not wanted or os.geteuid() != 0:
        return -1
    try:
        fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1
    kept = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FIRST_FREE_FD)  # clear of the fds a child puts in place
    os.close(fd)
    return kept


def receive_config(control: socket.socket) -> dict:
    """The config, sent as its length and then in chunks; {} when the caller closed the socket first."""
    length = int(control.recv(64) or b"0")
    data = b""
    while len(data) < length:
        chunk = control.recv(CONFIG_CHUNK)
        if not chunk:
            return {}
        data += chunk
    return json.loads(data) if data else {}


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    config = receive_config(control)
    sys.path.extend(path for path in config.get("site_dirs", ()) if path not in sys.path)
    control.send(json.dumps(preload(config.get("preload", []), config.get("hidden", []))).encode())
    opened = {}
    for path, (fd, is_dir) in _isolation.open_paths([*config.get("read_roots", ()),
                                                     *config.get("list_roots", ())]).items():
        opened[path] = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FIRST_KEPT_FD), is_dir)  # clear of a child's 0-4
        os.close(fd)
    try:
        forker = _clone.Forker(own_pid_namespace(config.get("pid_namespace", True)), config.get("clone3", True))
        serve_forever(control, opened, (config.get("read_roots", []), config.get("list_roots", [])), forker)
    finally:
        os._exit(0)  # the children die with this process (their parent-death signal)


if __name__ == "__main__":
    main()
