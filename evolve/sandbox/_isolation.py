"""The kernel's confinement of the sandbox child, applied by the harness (evolve/sandbox/_child.py) to itself.

Namespaces (`enter_namespaces`): network, mount and PID namespaces of its own. The network one's only interface
(loopback) is down. In the PID namespace the harness forks an init and the candidate's process
(`become_pid_two`), which sees and signals only its own processes; when it ends the kernel kills every process it
started, setsid daemons included, and the outer process exits as it did. In the mount namespace the candidate's
folder becomes a tmpfs of a fixed size (`private_folder`): the kernel refuses writes past the total cap (ENOSPC)
and files past the cap on their number; /proc, /sys and /dev/pts are covered by empty tmpfs mounts and /dev/shm
by a small private one (`hide_system`). Root unshares directly, and later becomes a private unused uid; first it
makes the interpreter readable to that uid whatever the modes of the folders above it (`expose`: the folder that
stops other users is covered by a tmpfs and the needed folders bound back in place). Another user creates a user
namespace along with them, mapping only its own uid and gid, and gives up the capabilities it got there once
the mounts are made. Skipped where the kernel refuses (no unprivileged user namespaces, or AppArmor stripping
them of every capability): then the supervisor's watcher caps the folder and its cgroup (if any) ends the
processes.
seccomp (`_seccomp.py`): what no candidate needs (sockets, file metadata, other processes' limits and
priorities, mounts, namespaces, keys, bpf, memfd...). Landlock (`landlock`): file access by path, TCP, signals.
Capabilities and uid (`drop_privileges`).
Standard library only (os, ctypes): the harness loads this before anything of the candidate's.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

if __package__:  # imported as evolve.sandbox._isolation
    from evolve.sandbox import _seccomp
else:  # loaded by the harness, whose folder is on sys.path while it imports this
    import _seccomp  # type: ignore[no-redef]

# Landlock (Linux >= 5.13). Syscall numbers are the same on every architecture.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read_file, read_dir
_READ_DIR = 1 << 3
_WRITE_BY_ABI = {
    1: sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)),  # write_file, remove_*, make_*
    2: 1 << 13,  # refer
    3: 1 << 14,  # truncate
}
_FILE_ONLY = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14)  # rights that apply to a file, not a directory
_NET = (1 << 0) | (1 << 1)  # bind_tcp, connect_tcp (ABI >= 4)
_SCOPE = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI >= 6)
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
_PR_SET_PDEATHSIG = 1
_CAPABILITY_VERSION_3 = 0x20080522
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
_MS_BIND = 1 << 12
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _AT_RECURSIVE, _AT_FDCWD = 1, os.O_CLOEXEC, 0x8000, -100
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same on every architecture
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18
_APPARMOR_USERNS = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or it is disabled)."""
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def scope_signals(libc: ctypes.CDLL) -> bool:
    """A nested Landlock domain that only scopes signals and abstract UNIX sockets (ABI >= 6): this process and its
    children can no longer signal the processes of the domain above it (its init and outer process, forked before
    it under the same rules). True if applied."""
    if landlock_abi(libc) < 6:
        return False
    attr = (ctypes.c_uint64 * 3)(0, 0, _SCOPE)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(24), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    restricted = libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    os.close(ruleset)
    return restricted == 0


def open_paths(paths: Sequence[str]) -> dict[str, tuple[int, bool]]:
    """path -> (O_PATH fd, is a directory) for each path that exists: a fork server opens the read roots once, as
    hundreds of opens and stats are most of what Landlock costs a child; the child passes them to `landlock`."""
    opened = {}
    for path in paths:
        try:
            opened[path] = (os.open(path, os.O_PATH | os.O_CLOEXEC), os.path.isdir(path))
        except OSError:
            continue
    return opened


def landlock(libc: ctypes.CDLL, workdir: str, read_roots: list[str], list_roots: Sequence[str] = (),
             opened: dict[str, tuple[int, bool]] | None = None, writable: Sequence[str] = ()) -> int:
    """Writes only under workdir (and the folders in `writable`), reads only under read_roots, and only listing of
    the folders in list_roots;
    returns the ABI applied, 0 where unsupported. Paths in `opened` (see open_paths) are not opened again; their
    fds are left to the caller to close."""
    abi = landlock_abi(libc)
    if abi == 0:
        return 0
    write = sum(rights for level, rights in _WRITE_BY_ABI.items() if abi >= level)
    handled = _READ | write
    attr = (ctypes.c_uint64 * 3)(handled, _NET if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    rules = [(workdir, handled), ("/dev/null", handled & _FILE_ONLY)] + [(folder, handled) for folder in writable]
    rules += [(root, _READ) for root in read_roots]
    rules += [(folder, _READ_DIR) for folder in list_roots]
    opened = opened or {}
    for path, rights in rules:
        fd, is_dir = opened.get(path, (-1, False))
        if fd < 0:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            is_dir = os.path.isdir(path)
        if not is_dir:
            rights &= _FILE_ONLY
        rule = _PathBeneath(rights, fd)
        libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        if path not in opened:
            os.close(fd)
    restricted = libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    os.close(ruleset)
    return abi if restricted == 0 else 0


def enter_namespaces(libc: ctypes.CDLL, pid: bool = True) -> bool:
    """Unshare network, mount and (with `pid`) PID namespaces (see the module docstring); True if done. The PID
    namespace takes the next child forked (become_pid_two); without `pid` this process is already the init of one
    (a fork server made it so: _clone.py). Another user's user namespace keeps its capabilities until
    the mounts are made: drop them after."""
    namespaces = _CLONE_NEWNET | _CLONE_NEWNS | (_CLONE_NEWPID if pid else 0)
    if os.geteuid() == 0:
        return libc.unshare(namespaces) == 0
    try:
        with open(_APPARMOR_USERNS) as handle:
            if handle.read().strip() != "0":
                return False
    except OSError:
        pass
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | namespaces) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:  # raises (and the candidate never runs) if refused
            handle.write(text)
    return True


def become_pid_two(libc: ctypes.CDLL, outer_fds: Sequence[int]) -> None:
    """Fork into the PID namespace that enter_namespaces unshared, twice: an init (pid 1, which only reaps) and,
    returning here, the process that will run the candidate (pid 2; not pid 1, which the kernel shields from every
    signal it has no handler for, SIGXCPU and the candidate's own kill included). The init reports pid 2's wait
    status to the outer process and exits, and the kernel then kills every process left in the namespace, setsid
    daemons included. The outer process closes `outer_fds` (the result and request pipes: only pid 2 answers),
    waits and exits as pid 2 did, by the same signal or with the same code (SIGKILL where the init was killed
    first). Each dies with its parent (die_with_parent)."""
    status_read, status_write = os.pipe()
    init = os.fork()
    if init:
        _outer(libc, init, status_read, status_write, outer_fds)
    os.close(status_read)
    die_with_parent(libc, 0)  # the parent is outside the namespace
    fork_candidate(libc, outer_fds, status_write)


def fork_candidate(libc: ctypes.CDLL, outer_fds: Sequence[int], status_write: int) -> None:
    """As the init of a PID namespace (pid 1): fork the process that will run the candidate (pid 2) and return in
    it. The init itself closes `outer_fds`, ignores SIGINT, reaps until pid 2 ends, writes pid 2's wait status on
    `status_write` (read by whoever reaps the init: the outer process of become_pid_two, or the fork server) and
    exits; the kernel then kills every process left in the namespace."""
    candidate = os.fork()
    if candidate == 0:
        os.close(status_write)
        return
    _close_all(outer_fds)
    libc.signal(2, ctypes.c_void_p(1))  # SIGINT: SIG_IGN (a same-uid candidate without Landlock scoping)
    while True:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        if pid == candidate:
            os.write(status_write, str(status).encode())
            os._exit(0)


def _outer(libc: ctypes.CDLL, init: int, status_read: int, status_write: int, outer_fds: Sequence[int]) -> None:
    os.close(status_write)
    _close_all(outer_fds)
    report = b""
    while chunk := os.read(status_read, 64):
        report += chunk
    while True:
        try:
            _, status = os.waitpid(init, 0)
            break
        except InterruptedError:
            continue
    if report.isdigit():
        status = int(report)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        libc.signal(number, None)  # SIG_DFL
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def blocked_ancestor(path: str) -> str | None:
    """The topmost folder above `path` that other users may not search (no o+x), None if every one may."""
    parts = os.path.realpath(path).split("/")[1:-1]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return None
    return None


def expose(libc: ctypes.CDLL, paths: Sequence[str]) -> list[str]:
    """As root in a private mount namespace: make each folder in `paths` reachable by any uid. A folder above one
    that other users may not search (a home folder of mode 700) is covered by a tmpfs of mode 755 holding only
    the paths below it, each bound back in place (the same inodes, so Landlock's rules still apply). The files'
    own modes stay as they are. Returns the paths bound back (empty where nothing stood in the way)."""
    wanted: dict[str, list[str]] = {}
    for path in sorted({os.path.realpath(path) for path in paths}):
        ancestor = blocked_ancestor(path + "/x")  # the path itself must be searchable too
        if ancestor is not None and ancestor != path and os.path.isdir(path):
            wanted.setdefault(ancestor, []).append(path)
    bound: list[str] = []
    libc.syscall.restype = ctypes.c_long
    for ancestor, below in wanted.items():
        below = [path for path in below if not any(path.startswith(other + "/") for other in below)]
        trees = [libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, path.encode(),
                              _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE) for path in below]
        if min(trees, default=0) < 0 or libc.mount(b"tmpfs", ancestor.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                                                    b"size=64k,mode=0755") != 0:
            for tree in trees:
                if tree >= 0:
                    os.close(tree)
            continue
        mask = os.umask(0o022)
        try:
            for path, tree in zip(below, trees, strict=True):
                os.makedirs(path, mode=0o755, exist_ok=True)
                if libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, path.encode(), _MOVE_MOUNT_F_EMPTY_PATH) == 0:
                    bound.append(path)
                os.close(tree)
        finally:
            os.umask(mask)
    return bound


def private_folder(libc: ctypes.CDLL, folder: str, max_bytes: int, max_entries: int, owner: int | None) -> bool:
    """Mount a tmpfs of max_bytes (and max_entries inodes) over `folder`, owned by `owner` (default: this
    process), keeping the files already in it, and move into it; True if mounted. Needs the mount namespace
    of enter_namespaces: mounts are made private first, so nothing propagates back to the caller's."""
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False
    kept = {}
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as handle:
                kept[entry.name] = handle.read()
    uid, gid = (owner, owner) if owner is not None else (os.geteuid(), os.getegid())
    options = f"size={max_bytes},nr_inodes={max_entries},mode=0700,uid={uid},gid={gid}".encode()
    if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        return False
    os.chdir(folder)  # the working directory was the folder beneath the mount
    for name, data in kept.items():
        path = os.path.join(folder, name)
        with open(path, "wb") as handle:
            handle.write(data)
        os.chown(path, uid, gid)
    return True


def hide_system(libc: ctypes.CDLL, shm_bytes: int, owner: int | None) -> list[str]:
    """In this mount namespace (after private_folder, which made mounts private): cover /proc, /sys and /dev/pts
    with empty read-only tmpfs mounts (no process, terminal or cgroup of the host is listed or readable there,
    Landlock or not), and /dev/shm with a private tmpfs of shm_bytes owned by `owner` (POSIX semaphores and
    shared memory keep working, and count as the folder does). Returns the folders covered."""
    covered = []
    flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for folder in ("/proc", "/sys", "/dev/pts"):
        if os.path.isdir(folder) and libc.mount(b"tmpfs", folder.encode(), b"tmpfs", flags,
                                                 b"size=4k,nr_inodes=1,mode=0555") == 0:
            covered.append(folder)
    uid = owner if owner is not None else os.geteuid()
    options = f"size={shm_bytes},nr_inodes=1024,mode=0700,uid={uid},gid={uid}".encode()
    if os.path.isdir("/dev/shm") and libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                                                options) == 0:
        covered.append("/dev/shm")
    return covered


def refuse_syscalls(libc: ctypes.CDLL) -> bool:
    """The seccomp filter of _seccomp.py (needs no_new_privs); True if installed."""
    return _seccomp.install(libc)


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """Give up every capability, bounding set and ambient set included."""
    for capability in range(64):  # EINVAL past the kernel's last capability
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    if libc.capset(ctypes.byref(header), ctypes.byref((ctypes.c_uint32 * 6)())) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def no_new_privileges(libc: ctypes.CDLL) -> None:
    """No exec can grant privileges from here on (and Landlock and seccomp may be applied unprivileged)."""
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def die_with_parent(libc: ctypes.CDLL, parent: int) -> None:
    """SIGKILL when the caller dies (set after any uid change, which clears it); exit now if it already has."""
    libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def drop_privileges(libc: ctypes.CDLL, uid: int | None) -> None:
    """As root: become `uid`, the private uid the parent chose (never uid 0: without one this raises, and the
    candidate never runs). Another user gives up the capabilities its own user namespace (enter_namespaces)
    granted, and every user's bounding and ambient sets are emptied."""
    if os.geteuid() != 0:
        drop_capabilities(libc)
        return
    if uid is None or uid == 0:
        raise PermissionError("the sandbox has no private uid to run the candidate as")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
