"""The harness run inside the sandbox's child process: read the job, confine itself, import the candidate, report.

Started by evolve/sandbox/core.py as `python -I -S -B _child.py RESULT_FD [REQUEST_FD]`, or forked by the fork
server (_forkserver.py), which then calls serve(3, 4 or None) with the same fds in place. The job arrives as
one JSON line on stdin; the parent closes stdin once it has put this process into its cgroups, and the harness
forks the candidate's process only after that EOF, so nothing of the candidate's runs outside them or before the
confinement is complete. It names the candidate file, the
target (a function of the candidate's, or a trusted driver file when "driver" is true: then each call is
driver.drive(candidate_module, payload)), workdir, site_dirs, read_roots, the rlimits and, when the parent
asks for it, a uid to drop to. Results are JSON lines on RESULT_FD: {"ok": true, "value": ...} or
{"ok": false, "kind": ..., "detail": ...}.
- One call (no REQUEST_FD): the job's payload is the call's; one result line, then exit.
- A session (REQUEST_FD): {"ready": true} once the candidate is imported, then one result line per JSON
  payload line read from REQUEST_FD; the parent times each round trip itself.
The kernel's confinement (namespaces, a tmpfs for its folder, Landlock, seccomp, capabilities) is in
_isolation.py beside it, loaded before anything of the candidate's.
Kept import-light on purpose (os, sys, json, resource, ctypes, no importlib): every evaluation pays its start.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import sys
from collections.abc import Callable

if __package__:  # imported as evolve.sandbox._child
    from evolve.sandbox import _isolation
else:  # run as the harness: -I leaves this file's folder off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _isolation  # type: ignore[no-redef]

    del sys.path[0]

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


def read_line(fd: int) -> bytes:
    """Bytes up to the first newline (the job), read one chunk at a time; the rest of the stream is left."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def wait_for_cgroups() -> None:
    """Block until the supervisor closes stdin, which it does once this process is in its cgroups (a write to
    cgroup.procs waits for an RCU grace period, ~10 ms, overlapped with the confinement before it); then stdin is
    /dev/null. Processes forked after this start in those cgroups."""
    read_all(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


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
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # a cap on its folder or on one file
            return {"ok": False, "kind": "bad_output", "detail": f"wrote over its write cap: {describe(exc)}"}
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


def confine(job: dict, opened: dict[str, tuple[int, bool]] | None = None,
            outer_fds: tuple[int, ...] = (), status_fd: int | None = None) -> dict | object | None:
    """Set the limits, load the trusted driver (if any) while the project is still readable, then lock this
    process down: namespaces, mounts and Landlock first, while the supervisor puts this process in its cgroups
    (wait_for_cgroups: EOF on stdin); then the PID namespace's init and pid 2, which runs the candidate under an
    outer process that only waits for it (`outer_fds`, the pipes to the supervisor, are closed there). Returns the
    driver module (None without one), or the failure message if it did not load or the private uid cannot read the
    interpreter.
    `opened`: read roots a fork server opened (_isolation.open_paths), closed here once Landlock is applied.
    `status_fd`: this process is already the init of a PID namespace of its own (the fork server forked it there);
    it forks only pid 2 and writes pid 2's wait status on status_fd for the server."""
    parent = os.getppid()
    sys.path.extend(path for path in job["site_dirs"] if path not in sys.path)  # a fork server added them
    set_limits(job["limits"])
    driver = None
    if job["driver"]:
        try:
            driver = load_module("evolve_driver", job["target"])
        except BaseException as exc:  # noqa: BLE001 - reported, and the candidate is never run
            print_traceback(exc)
            return {"ok": False, "kind": "crash", "detail": f"the driver failed to load: {describe(exc)}"}
    libc = ctypes.CDLL(None, use_errno=True)
    limits, uid = job["limits"], job["uid"]
    writable = []
    _isolation.die_with_parent(libc, parent)
    isolated = _isolation.enter_namespaces(libc, pid=status_fd is None)
    if isolated:  # mounts apply to this process's new mount namespace, and to the processes it forks later
        _isolation.private_folder(libc, job["workdir"], limits["folder_bytes"], limits["folder_entries"], uid)
        if uid is not None:
            _isolation.expose(libc, job["expose"])
        if "/dev/shm" in _isolation.hide_system(libc, limits["folder_bytes"], uid):
            writable.append("/dev/shm")
    _isolation.no_new_privileges(libc)
    _isolation.landlock(libc, job["workdir"], job["read_roots"], job["list_roots"], opened, writable)
    for fd, _ in (opened or {}).values():
        os.close(fd)
    wait_for_cgroups()
    if status_fd is not None:
        _isolation.fork_candidate(libc, outer_fds, status_fd)
    elif isolated:
        _isolation.become_pid_two(libc, outer_fds)
    if status_fd is not None or isolated:
        parent = 1  # the namespace's init
        _isolation.scope_signals(libc)  # Landlock came before the fork: a domain of its own keeps the init apart
    _isolation.drop_privileges(libc, uid)  # raises (and the candidate is never run) if it cannot
    _isolation.die_with_parent(libc, parent)
    if uid is not None and not os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK):
        return {"ok": False, "kind": "crash", "detail": f"the sandbox's private uid cannot read the interpreter "
                f"at {os.path.dirname(os.__file__)}: make it readable to other users, or allow mount namespaces"}
    _isolation.refuse_syscalls(libc)
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


def run(job: dict, result_fd: int, request_fd: int | None, opened: dict[str, tuple[int, bool]] | None = None,
        status_fd: int | None = None) -> None:
    """One call (request_fd None): load, call once, report. A session: load, report ready, then one reply
    line per request line until the parent closes the request pipe or kills this process."""
    driver = confine(job, opened, tuple(fd for fd in (result_fd, request_fd) if fd is not None), status_fd)
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
    serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)


def serve(result_fd: int, request_fd: int | None, opened: dict[str, tuple[int, bool]] | None = None,
          status_fd: int | None = None, roots: tuple[list[str], list[str]] | None = None) -> None:
    """Read the job on stdin and run it (also the entry of a child forked by _forkserver.py, with the read roots
    it opened and their lists, `roots`, which its jobs leave out, and where it forked the child as a PID namespace's
    init, the pipe for pid 2's wait status); never returns."""
    for fd in (result_fd, request_fd):
        if fd is not None:
            os.set_inheritable(fd, False)  # programs the candidate starts get neither pipe
    job = json.loads(read_line(0))
    if job["read_roots"] is None and roots is not None:  # a forked child's job leaves them to its fork server
        job["read_roots"], job["list_roots"] = roots
    run(job, result_fd, request_fd, opened, status_fd)
    os._exit(0)  # no atexit handlers or finalisers of the candidate's after the report


if __name__ == "__main__":
    main()
