"""The sandbox child's seccomp filter: the system calls no candidate needs, refused before its code runs.

Built as a classic BPF program (no libseccomp) for x86_64 and aarch64, and installed by the harness
(_isolation.refuse_syscalls) after no_new_privs. Every call made through another architecture's entry (32-bit,
x32), whose numbers differ, fails with EACCES. Refused, by what they would let a candidate do:
- the network: socket() of every family fails with EACCES (socketpair() stays: a connected pair reaches nothing
  outside, and multiprocessing uses it); io_uring_setup (it would do file and socket work out of sight of this
  filter); pidfd_getfd.
- file metadata, which Landlock does not cover: chmod, chown, utime and xattr families (a setuid bit on a
  root-owned program, an mtime or a mode changed outside its folder), mknod.
- other processes: prlimit64 on another pid, and setting any limit (reading its own stays: getrlimit goes through
  it); setrlimit; setpriority, ioprio_set and the sched_set* calls on another pid; ptrace, process_vm_readv and
  writev, kcmp.
- the kernel's wider surface: mount and the new mount API, pivot_root, chroot, unshare, setns, clone with a
  namespace flag (clone3 answers ENOSYS, so libc falls back to clone, whose flags this filter can read), keyctl,
  add_key, request_key, bpf, perf_event_open, userfaultfd, memfd_create and memfd_secret (memory out of reach of
  RLIMIT_AS), module loading, kexec, swap, acct, quotactl.
Standard library only: the harness loads this before anything of the candidate's.
"""

from __future__ import annotations

import ctypes
import errno
import os

# Each rule: (name, x86_64 number or None where the call does not exist, aarch64 number or None, condition).
# Conditions: "always"; ("nonzero", i, ...): refused when any of those arguments is not 0 (a pid, a pointer);
# ("low_nonzero", i): refused when the low 32 bits of argument i are not 0 (an int such as a pid_t);
# ("flags", i, mask): refused when argument i has any bit of mask.
_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_NETWORK = (("socket", 41, 198, "always"), ("io_uring_setup", 425, 425, "always"),
            ("pidfd_getfd", 438, 438, "always"))
_REFUSED = (
    ("chmod", 90, None, "always"), ("fchmod", 91, 52, "always"), ("fchmodat", 268, 53, "always"),
    ("fchmodat2", 452, 452, "always"), ("chown", 92, None, "always"), ("fchown", 93, 55, "always"),
    ("lchown", 94, None, "always"), ("fchownat", 260, 54, "always"), ("utime", 132, None, "always"),
    ("utimes", 235, None, "always"), ("futimesat", 261, None, "always"), ("utimensat", 280, 88, "always"),
    ("setxattr", 188, 5, "always"), ("lsetxattr", 189, 6, "always"), ("fsetxattr", 190, 7, "always"),
    ("removexattr", 197, 14, "always"), ("lremovexattr", 198, 15, "always"), ("fremovexattr", 199, 16, "always"),
    ("setxattrat", 463, 463, "always"), ("removexattrat", 466, 466, "always"),
    ("mknod", 133, None, "always"), ("mknodat", 259, 33, "always"),
    ("prlimit64", 302, 261, ("nonzero", 0, 2)), ("setrlimit", 160, 164, "always"),
    ("setpriority", 141, 140, ("low_nonzero", 1)), ("ioprio_set", 251, 30, ("low_nonzero", 1)),
    ("sched_setaffinity", 203, 122, ("low_nonzero", 0)), ("sched_setparam", 142, 118, ("low_nonzero", 0)),
    ("sched_setscheduler", 144, 119, ("low_nonzero", 0)), ("sched_setattr", 314, 274, ("low_nonzero", 0)),
    ("ptrace", 101, 117, "always"), ("process_vm_readv", 310, 270, "always"),
    ("process_vm_writev", 311, 271, "always"), ("kcmp", 312, 272, "always"),
    ("mount", 165, 40, "always"), ("umount2", 166, 39, "always"), ("pivot_root", 155, 41, "always"),
    ("chroot", 161, 51, "always"), ("open_tree", 428, 428, "always"), ("move_mount", 429, 429, "always"),
    ("fsopen", 430, 430, "always"), ("fsconfig", 431, 431, "always"), ("fsmount", 432, 432, "always"),
    ("fspick", 433, 433, "always"), ("mount_setattr", 442, 442, "always"),
    ("unshare", 272, 97, "always"), ("setns", 308, 268, "always"), ("clone", 56, 220, ("flags", 0, _NAMESPACE_FLAGS)),
    ("keyctl", 250, 219, "always"), ("add_key", 248, 217, "always"), ("request_key", 249, 218, "always"),
    ("bpf", 321, 280, "always"), ("perf_event_open", 298, 241, "always"), ("userfaultfd", 323, 282, "always"),
    ("memfd_create", 319, 279, "always"), ("memfd_secret", 447, 447, "always"),
    ("init_module", 175, 105, "always"), ("finit_module", 313, 273, "always"), ("delete_module", 176, 106, "always"),
    ("kexec_load", 246, 104, "always"), ("swapon", 167, 224, "always"), ("swapoff", 168, 225, "always"),
    ("acct", 163, 89, "always"), ("quotactl", 179, 60, "always"),
)
_NO_SUCH_CALL = (("clone3", 435, 435, "always"),)  # ENOSYS: libc falls back to clone
_ARCHES = {"x86_64": (0xC000003E, 1), "aarch64": (0xC00000B7, 2)}  # audit arch, column of the rule's number
_X32_SYSCALL_BIT = 0x40000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes
_NR, _ARCH, _ARGS = 0, 4, 16  # offsets in struct seccomp_data


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


Instruction = tuple[int, int, int, int]


def _refusal(condition: object, refuse: int) -> list[Instruction]:
    """The instructions after a rule's number matched: each ends in a return (allow, or `refuse`)."""
    if condition == "always":
        return [(_RET_K, 0, 0, refuse)]
    kind, *rest = condition  # type: ignore[misc]
    if kind == "flags":
        index, mask = rest
        return [(_LD_ABS_W, 0, 0, _ARGS + 8 * index), (_JSET_K, 1, 0, mask), (_RET_K, 0, 0, _RET_ALLOW),
                (_RET_K, 0, 0, refuse)]
    words = [_ARGS + 8 * index for index in rest]
    if kind == "nonzero":
        words += [offset + 4 for offset in words]  # the high half too: a pointer
    body: list[Instruction] = []
    for position, offset in enumerate(words):
        left = len(words) - position - 1  # word checks after this one, two instructions each
        body += [(_LD_ABS_W, 0, 0, offset), (_JEQ_K, 0, 2 * left + 1, 0)]
    return body + [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, refuse)]


def program(machine: str) -> list[Instruction] | None:
    """The filter for this machine's architecture, None where it has no table here."""
    arch = _ARCHES.get(machine)
    if arch is None:
        return None
    audit_arch, column = arch
    refuse_foreign = _RET_ERRNO | errno.EACCES
    code: list[Instruction] = [(_LD_ABS_W, 0, 0, _ARCH), (_JEQ_K, 1, 0, audit_arch), (_RET_K, 0, 0, refuse_foreign),
                               (_LD_ABS_W, 0, 0, _NR), (_JGE_K, 0, 1, _X32_SYSCALL_BIT), (_RET_K, 0, 0, refuse_foreign)]
    groups = ((_NETWORK, errno.EACCES), (_REFUSED, errno.EPERM), (_NO_SUCH_CALL, errno.ENOSYS))
    for rules, error in groups:
        for rule in rules:
            number = rule[column]
            if number is None:
                continue
            body = _refusal(rule[3], _RET_ERRNO | error)
            code += [(_LD_ABS_W, 0, 0, _NR), (_JEQ_K, 0, len(body), number), *body]
    return code + [(_RET_K, 0, 0, _RET_ALLOW)]


def refused_names(machine: str) -> list[str]:
    """Names of the calls the filter refuses (in whole or in part) on `machine`; for the documentation and tests."""
    arch = _ARCHES.get(machine)
    if arch is None:
        return []
    return [rule[0] for rules in (_NETWORK, _REFUSED, _NO_SUCH_CALL) for rule in rules if rule[arch[1]] is not None]


def _compile(machine: str) -> tuple[ctypes.Array[_SockFilter], int] | None:
    code = program(machine)
    if code is None:
        return None
    return (_SockFilter * len(code))(*(_SockFilter(*instruction) for instruction in code)), len(code)


# Built once at import (a fork server's children inherit it): building it costs more than installing it.
_COMPILED = _compile(os.uname().machine)


def install(libc: ctypes.CDLL) -> bool:
    """Install the filter on this process (needs no_new_privs, or CAP_SYS_ADMIN); True if installed."""
    if _COMPILED is None:
        return False
    filters, length = _COMPILED
    fprog = _SockFprog(length, filters)
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
