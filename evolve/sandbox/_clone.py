"""How the fork server (_forkserver.py) forks a child: as the init of a PID namespace of its own, and into its cgroup.

`fork_child` makes each child, where the kernel and this process's rights allow:
- the init (pid 1) of a PID namespace of its own (root), so the child forks only the candidate's process, pid 2
  (a plain child would fork an init and pid 2 itself: one fork and one exit more);
- already in its run's cgroup v2 (clone3 with CLONE_INTO_CGROUP, Linux >= 5.7), so the supervisor need not write
  the child's pid to cgroup.procs, a write that waits for an RCU grace period (~10 ms).
Each falls back on its own: without clone3 (ENOSYS), or where the kernel refuses the cgroup (a cgroup v1 fd, a
cgroup v2 that cannot take processes), the child is forked with os.fork (into a PID namespace by unshare, fork and
setns back) and the supervisor writes cgroup.procs as before; without the right to make a PID namespace it is a
plain fork that makes its own namespace, as a fresh child does.
Standard library only (os, ctypes).
"""

from __future__ import annotations

import ctypes
import errno
import os

_CLONE_NEWPID = 0x20000000
_CLONE_INTO_CGROUP = 0x200000000
_SYS_CLONE3 = 435  # the same on every architecture
_SIGCHLD = 17
# clone3's refusals that mean "not this way" (no clone3, an older struct, a v1 or unusable cgroup), not "no fork"
_FALL_BACK = (errno.ENOSYS, errno.E2BIG, errno.EINVAL, errno.EBADF, errno.EOPNOTSUPP, errno.EBUSY)


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal",
                                                      "stack", "stack_size", "tls", "set_tid", "set_tid_size",
                                                      "cgroup")]


class Forker:
    """Forks a fork server's children (see the module docstring). `own_namespace`: an fd of this process's PID
    namespace (/proc/self/ns/pid) where it may make PID namespaces (root), else -1. `clone3`: whether to try clone3
    for a child that has a cgroup (False, or once the kernel said ENOSYS: never)."""

    def __init__(self, own_namespace: int, clone3: bool = True) -> None:
        self.own_namespace = own_namespace
        self.clone3 = clone3
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._held = ctypes.PyDLL(None, use_errno=True)  # holds the GIL across the call, as os.fork does
        self._held.syscall.restype = ctypes.c_long

    def fork_child(self, cgroup: int = -1) -> tuple[int, bool, bool]:
        """fork(): (pid, whether the child is the init of a PID namespace of its own, whether it started in the
        cgroup v2 that `cgroup`, an fd of its folder, names); 0 as pid in the child."""
        if cgroup >= 0 and self.clone3:
            pid = self._clone3(_CLONE_INTO_CGROUP | (_CLONE_NEWPID if self.own_namespace >= 0 else 0), cgroup)
            if pid >= 0:
                return pid, self.own_namespace >= 0, True
        pid, in_namespace = self._fork()
        return pid, in_namespace, False

    def _clone3(self, flags: int, cgroup: int) -> int:
        """The child's pid (0 in the child), or -1 where clone3 refused in a way that os.fork may still do it."""
        arguments = _CloneArgs(flags=flags, exit_signal=_SIGCHLD, cgroup=cgroup)
        api = ctypes.pythonapi
        api.PyOS_BeforeFork()
        pid = self._held.syscall(_SYS_CLONE3, ctypes.byref(arguments), ctypes.c_size_t(ctypes.sizeof(arguments)))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        failure = ctypes.get_errno()
        api.PyOS_AfterFork_Parent()
        if pid > 0:
            return pid
        if failure == errno.ENOSYS:
            self.clone3 = False
        if failure in _FALL_BACK:
            return -1
        raise OSError(failure, f"clone3: {os.strerror(failure)}")

    def _fork(self) -> tuple[int, bool]:
        """os.fork(), the child in a PID namespace of its own where this process may make one: (pid, whether)."""
        if self.own_namespace < 0 or self._libc.unshare(_CLONE_NEWPID) != 0:
            return os.fork(), False
        try:
            pid = os.fork()
        except BaseException:
            self._restore()
            raise
        if pid:
            self._restore()
        return pid, True

    def _restore(self) -> None:
        """Point this process's next children back at its own PID namespace (the one just made holds one process
        and dies with it); raises where the kernel refuses, as every later fork would then fail."""
        if self._libc.setns(self.own_namespace, _CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the fork server's own PID namespace failed")
