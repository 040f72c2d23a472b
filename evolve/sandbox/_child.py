"""The harness run inside the sandbox's child process: read the job, confine itself, import the candidate, report.

Started by evolve/sandbox/core.py as `python -I -S -B _sandbox_child.py RESULT_FD [REQUEST_FD]`. The job arrives as
one JSON object on stdin, written by the parent only after it has put this process into its pids cgroup,
so nothing of the candidate's runs before the confinement is complete. It names the candidate file, the
target (a function of the candidate's, or a trusted driver file when "driver" is true: then each call is
driver.drive(candidate_module, payload)), workdir, site_dirs, read_roots, the rlimits and, when the parent
asks for it, a uid to drop to. Results are JSON lines on RESULT_FD: {"ok": true, "value": ...} or
{"ok": false, "kind": ..., "detail": ...}.
- One call (no REQUEST_FD): the job's payload is the call's; one result line, then exit.
- A session (REQUEST_FD): {"ready": true} once the candidate is imported, then one result line per JSON
  payload line read from REQUEST_FD; the parent times each round trip itself.
No network: the harness moves itself into a network namespace of its own (as root directly; as another user
inside a user namespace of its own, where the kernel allows unprivileged ones), which has only a loopback that
is down, and installs a seccomp filter that refuses socket() (every family: UNIX sockets live on paths, which a
network namespace does not separate), io_uring and pidfd_getfd, where the architecture is x86_64 or aarch64.
Kept import-light on purpose (os, sys, json, resource, ctypes, no importlib): every evaluation pays its start.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import sys
from collections.abc import Callable, Sequence

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
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
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


def landlock(libc: ctypes.CDLL, workdir: str, read_roots: list[str], list_roots: Sequence[str] = ()) -> int:
    """Writes only under workdir, reads only under read_roots, and only listing of the folders in list_roots;
    returns the ABI applied, 0 where unsupported."""
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
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(path):
            rights &= _FILE_ONLY
        rule = _PathBeneath(rights, fd)
        libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        os.close(fd)
    restricted = libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    os.close(ruleset)
    return abi if restricted == 0 else 0


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def leave_network(libc: ctypes.CDLL) -> bool:
    """Move this process into a network namespace of its own (no interface up: nothing to reach); True if done.
    Root unshares directly. Another user creates a user namespace with it, mapping only its own uid and gid
    (so files it writes keep their owner), then gives up the capabilities that namespace granted. Skipped where
    AppArmor lets unprivileged user namespaces be created but strips them of every capability."""
    if os.geteuid() == 0:
        return libc.unshare(_CLONE_NEWNET) == 0
    try:
        with open(_APPARMOR_USERNS) as handle:
            if handle.read().strip() != "0":
                return False
    except OSError:
        pass
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:  # raises (and the candidate never runs) if refused
            handle.write(text)
    drop_capabilities(libc)
    return True


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


def drop_privileges(libc: ctypes.CDLL, uid: int | None) -> None:
    """Become `uid` when the parent gave one; else, as root, keep uid 0 (to read a private interpreter)
    but give up every capability, so the candidate cannot raise its rlimits, kill, mount or load modules."""
    if os.geteuid() != 0:
        return
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        return
    drop_capabilities(libc)


def set_limits(limits: dict[str, int | None]) -> None:
    cpu = limits["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at cpu, SIGKILL a second later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits["nproc"] is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))


def load_module(name: str, path: str) -> object:
    """Execute a source file as module `name` (no importlib: it costs milliseconds to import)."""
    module = type(sys)(name)
    module.__file__ = path
    sys.modules[name] = module
    with open(path, "rb") as handle:
        source = handle.read()
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def to_json(value: object) -> object:
    """json.dumps fallback: numpy arrays and scalars (tolist), sets; anything else is not JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


def describe(exc: BaseException) -> str:
    """`Type: last line of the message`, short; the candidate's exception may even fail to print."""
    try:
        lines = str(exc).strip().splitlines()
    except BaseException:  # noqa: BLE001
        lines = []
    return (f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__)[:500]


def describe_code(code: object) -> str:
    return repr(code)[:100] if type(code) in (type(None), int, str) else type(code).__name__


def print_traceback(exc: BaseException) -> None:
    try:
        import traceback

        traceback.print_exception(exc, limit=-8)
    except BaseException:  # noqa: BLE001 - the traceback is a courtesy; the report matters
        pass


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


class MissingFunction(Exception):
    """The candidate does not define the function the job calls."""


class CandidateOutOfMemory(BaseException):
    """A MemoryError out of a candidate's function that a driver called. Not an Exception, so a driver's per-input
    `except Exception` cannot swallow it and go on to the next input until the wall clock runs out."""


def _escaping(function: Callable[..., object]) -> Callable[..., object]:
    def call(*args: object, **kwargs: object) -> object:
        try:
            return function(*args, **kwargs)
        except MemoryError as exc:
            raise CandidateOutOfMemory("MemoryError") from exc

    call.__name__, call.__qualname__, call.__doc__ = function.__name__, function.__qualname__, function.__doc__
    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


class DriverView:
    """The candidate module as a driver sees it: its attributes, its functions raising CandidateOutOfMemory for
    a MemoryError. The candidate's own calls between its functions go unwrapped (no cost to recursion)."""

    __slots__ = ("_module", "_wrapped")

    def __init__(self, module: object) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_wrapped", {})

    def __getattr__(self, name: str) -> object:
        value = getattr(self._module, name)
        if type(value) is not type(_escaping):
            return value
        wrapped = self._wrapped.get(name)
        if wrapped is None or wrapped.__wrapped__ is not value:
            wrapped = self._wrapped[name] = _escaping(value)
        return wrapped

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._module, name, value)


def guarded(action: Callable[[], object]) -> dict:
    """{"ok": True, "value": action()}, or the failure message for whatever the candidate's code raised."""
    try:
        return {"ok": True, "value": action()}
    except MissingFunction as exc:
        return {"ok": False, "kind": "crash", "detail": str(exc)}
    except (MemoryError, CandidateOutOfMemory):
        return {"ok": False, "kind": "memory", "detail": "MemoryError"}
    except OSError as exc:
        print_traceback(exc)
        return {"ok": False, "kind": "memory" if exc.errno == errno.ENOMEM else "crash", "detail": describe(exc)}
    except SystemExit as exc:
        return {"ok": False, "kind": "crash", "detail": f"the program called sys.exit({describe_code(exc.code)})"}
    except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is its result
        print_traceback(exc)
        return {"ok": False, "kind": "crash", "detail": describe(exc)}


def invoke(job: dict, candidate: object, driver: object | None, payload: object) -> object:
    """candidate.<target>(*payload), or driver.drive(candidate, payload) in driver mode."""
    if driver is not None:
        return driver.drive(DriverView(candidate), payload)  # type: ignore[attr-defined]
    function = getattr(candidate, job["target"], None)
    if not callable(function):
        raise MissingFunction(f"the program defines no function '{job['target']}'")
    return function(*payload)  # type: ignore[misc]


def confine(job: dict) -> dict | object | None:
    """Set the limits, load the trusted driver (if any) while the project is still readable, then lock this
    process down. Returns the driver module (None without one), or the failure message if it did not load."""
    parent = os.getppid()
    sys.path.extend(job["site_dirs"])
    set_limits(job["limits"])
    driver = None
    if job["driver"]:
        try:
            driver = load_module("evolve_driver", job["target"])
        except BaseException as exc:  # noqa: BLE001 - reported, and the candidate is never run
            print_traceback(exc)
            return {"ok": False, "kind": "crash", "detail": f"the driver failed to load: {describe(exc)}"}
    libc = ctypes.CDLL(None, use_errno=True)
    leave_network(libc)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    landlock(libc, job["workdir"], job["read_roots"], job["list_roots"])
    drop_privileges(libc, job["uid"])  # raises (and the candidate is never run) if it cannot
    libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL when the caller dies (a uid change clears it: set after)
    if os.getppid() != parent:  # the caller died before that
        os._exit(1)
    refuse_sockets(libc)
    return driver


def encode(message: dict) -> bytes:
    try:
        line = json.dumps(message, default=to_json)
    except MemoryError:
        line = json.dumps({"ok": False, "kind": "memory", "detail": "MemoryError while encoding the result"})
    except BaseException as exc:  # noqa: BLE001 - whatever the value's own methods raise while it is encoded
        line = json.dumps({"ok": False, "kind": "bad_output", "detail": f"result is not JSON: {describe(exc)}"})
    return (line + "\n").encode()


def report(result_fd: int, message: dict) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the candidate may have replaced or closed them
            pass
    write_all(result_fd, encode(message))


def run(job: dict, result_fd: int, request_fd: int | None) -> None:
    """One call (request_fd None): load, call once, report. A session: load, report ready, then one reply
    line per request line until the parent closes the request pipe or kills this process."""
    driver = confine(job)
    if isinstance(driver, dict):
        report(result_fd, driver)
        return
    if request_fd is None:
        call = guarded(lambda: invoke(job, load_module("candidate", job["program"]), driver, job["payload"]))
        report(result_fd, call)
        return
    loaded = guarded(lambda: load_module("candidate", job["program"]))
    if not loaded["ok"]:
        report(result_fd, loaded)
        return
    candidate = loaded["value"]
    report(result_fd, {"ready": True})
    with os.fdopen(request_fd, "rb") as requests:
        for line in requests:
            payload = json.loads(line)
            report(result_fd, guarded(lambda: invoke(job, candidate, driver, payload)))  # noqa: B023


def main() -> None:
    result_fd = int(sys.argv[1])
    request_fd = int(sys.argv[2]) if len(sys.argv) > 2 else None
    for fd in (result_fd, request_fd):
        if fd is not None:
            os.set_inheritable(fd, False)  # programs the candidate starts get neither pipe
    job = json.loads(read_all(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    run(job, result_fd, request_fd)
    os._exit(0)  # no atexit handlers or finalisers of the candidate's after the report


if __name__ == "__main__":
    main()
