"""The kernel's confinement of the sandbox child, applied by the harness (evolve/sandbox/_child.py) to itself.

Namespaces (`enter_namespaces`): a network namespace of its own, whose only interface (loopback) is down, and a
mount namespace in which the candidate's folder becomes a tmpfs of a fixed size (`private_folder`): the kernel
refuses writes past the total cap (ENOSPC) and files past the cap on their number; /proc is covered by an empty
tmpfs there (`hide_processes`), as Landlock also leaves it unreadable. Root unshares directly;
another user creates a user namespace along with them, mapping only its own uid and gid, and gives up the
capabilities it got there once the tmpfs is mounted. Skipped where the kernel refuses (no unprivileged user
namespaces, or AppArmor stripping them of every capability): then the supervisor's watcher caps the folder.
seccomp (`refuse_sockets`): socket() of every family (UNIX sockets live on paths, which no namespace separates),
io_uring_setup and pidfd_getfd fail with EACCES, on x86_64 and aarch64.
Landlock (`landlock`): file access by path, TCP, signals. Capabilities and uid (`drop_privileges`).
Standard library only (os, errno, ctypes): the harness loads this before anything of the candidate's.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence

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
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18
_APPARMOR_USERNS = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
# seccomp: audit arch and the numbers of socket, io_uring_setup and pidfd_getfd on each architecture filtered.
_SECCOMP_ARCHES = {"x86_64": (0xC000003E, (41, 425, 438)), "aarch64": (0xC00000B7, (198, 425, 438))}
_X32_SYSCALL_BIT = 0x40000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_EACCES = 0x7FFF0000, 0x00050000 | errno.EACCES
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06  # BPF opcodes (class | size | mode / op | source)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or it is disabled)."""
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


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
             opened: dict[str, tuple[int, bool]] | None = None) -> int:
    """Writes only under workdir, reads only under read_roots, and only listing of the folders in list_roots;
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
    rules = [(workdir, handled), ("/dev/null", handled & _FILE_ONLY)] + [(root, _READ) for root in read_roots]
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


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def enter_namespaces(libc: ctypes.CDLL) -> bool:
    """Move this process into network and mount namespaces of its own (see the module docstring); True if
    done. Another user's user namespace keeps its capabilities until `private_folder`: drop them after it."""
    if os.geteuid() == 0:
        return libc.unshare(_CLONE_NEWNET | _CLONE_NEWNS) == 0
    try:
        with open(_APPARMOR_USERNS) as handle:
            if handle.read().strip() != "0":
                return False
    except OSError:
        pass
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:  # raises (and the candidate never runs) if refused
            handle.write(text)
    return True


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


def hide_processes(libc: ctypes.CDLL) -> bool:
    """Cover /proc with an empty read-only tmpfs in this mount namespace (after private_folder, which made mounts
    private): no process, this one included, is listed or readable there, Landlock or not. True if covered."""
    flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    return libc.mount(b"tmpfs", b"/proc", b"tmpfs", flags, b"size=4k,nr_inodes=1,mode=0555") == 0


def refuse_sockets(libc: ctypes.CDLL) -> bool:
    """A seccomp filter (needs no_new_privs): socket(), io_uring_setup() and pidfd_getfd() fail with EACCES,
    and so does every call made through another architecture's entry (32-bit, x32), whose numbers differ.
    socketpair() stays: a connected pair reaches nothing outside (multiprocessing uses it). True if installed."""
    arch = _SECCOMP_ARCHES.get(os.uname().machine)
    if arch is None:
        return False
    audit_arch, refused = arch
    program = [(_LD_ABS_W, 0, 0, 4), (_JEQ_K, 1, 0, audit_arch), (_RET_K, 0, 0, _RET_EACCES),
               (_LD_ABS_W, 0, 0, 0), (_JGE_K, len(refused) + 1, 0, _X32_SYSCALL_BIT)]
    program += [(_JEQ_K, len(refused) - index, 0, number) for index, number in enumerate(refused)]
    program += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_EACCES)]
    filters = (_SockFilter * len(program))(*(_SockFilter(*instruction) for instruction in program))
    fprog = _SockFprog(len(program), filters)
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0


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
    """Become `uid` when the parent gave one; else, as root, keep uid 0 (to read a private interpreter)
    but give up every capability, so the candidate cannot raise its rlimits, kill, mount or load modules.
    Another user gives up the capabilities its own user namespace (enter_namespaces) granted."""
    if os.geteuid() != 0:
        drop_capabilities(libc)
        return
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        return
    drop_capabilities(libc)


