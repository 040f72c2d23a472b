"""The harness that runs inside the sandbox's child process: confine, import the candidate, call it, report.

argv: result_fd mode program_path target input_path
  mode "call":   target is a function name; the input file holds a JSON list of arguments.
  mode "driver": target is a trusted driver file; the input file holds the JSON payload, and
                 driver.drive(candidate_module, payload) is returned.
The result is one JSON line on result_fd: {"ok": true, "value": ...} or {"ok": false, "kind": ..., "detail": ...}.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import sys
import traceback
from typing import Any

# Landlock (Linux >= 5.13): writes only in the working directory; reads only of the interpreter,
# its libraries and the system; no TCP; (ABI >= 6) no signals to processes outside the sandbox.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read_file, read_dir
_WRITE_BY_ABI = {
    1: sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)),  # write_file, remove_*, make_*
    2: 1 << 13,  # refer
    3: 1 << 14,  # truncate
}
_FILE_ONLY = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14)  # rights that apply to a file, not a directory
_NET = (1 << 0) | (1 << 1)  # bind_tcp, connect_tcp (ABI >= 4)
_SCOPE = (1 << 0) | (1 << 1)  # abstract unix sockets, signals (ABI >= 6)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def readable_roots() -> list[str]:
    """What the candidate may read: the interpreter, its packages, the system; not the project."""
    import site

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    roots.update(("/usr", "/lib", "/lib64", "/etc", "/dev", "/proc", "/sys", "/bin", "/sbin"))
    return sorted(root for root in roots if os.path.exists(root))


def confine(workdir: str, read_roots: list[str]) -> int:
    """Apply Landlock to this process and its children; returns the ABI used, 0 where unsupported."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi <= 0:
        return 0
    write = sum(rights for level, rights in _WRITE_BY_ABI.items() if abi >= level)
    handled = _READ | write
    attr = (ctypes.c_uint64 * 3)(handled, _NET if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    rules = [(workdir, handled), ("/dev/null", (_READ | write) & _FILE_ONLY)]
    rules += [(root, _READ) for root in read_roots]
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
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by restrict_self
    if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        return 0
    os.close(ruleset)
    return abi


def _plain(value: Any) -> Any:
    """JSON fallback for numpy scalars and arrays without importing numpy."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot return a value of type {type(value).__name__}")


def _load_module(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip()[:500] if lines else type(exc).__name__


def main() -> None:
    result_fd, mode, program_path, target, input_path = sys.argv[1:6]
    fd = int(result_fd)
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # the candidate must not import the engine's modules by their short names

    def report(message: dict[str, Any]) -> None:
        os.write(fd, (json.dumps(message, default=_plain) + "\n").encode())

    with open(input_path) as handle:
        payload = json.load(handle)
    driver = _load_module("evolve_driver", target) if mode == "driver" else None  # trusted: before confine
    confine(os.getcwd(), readable_roots())
    try:
        candidate = _load_module("candidate", program_path)
        if driver is None:
            function = getattr(candidate, target, None)
            if not callable(function):
                report({"ok": False, "kind": "crash", "detail": f"the program defines no function '{target}'"})
                return
            value = function(*payload)
        else:
            value = driver.drive(candidate, payload)
    except MemoryError:
        report({"ok": False, "kind": "memory", "detail": "MemoryError"})
        return
    except SystemExit as exc:
        report({"ok": False, "kind": "crash", "detail": f"the program called sys.exit({exc.code!r})"})
        return
    except BaseException as exc:  # noqa: BLE001 - any failure of the candidate is its result
        report({"ok": False, "kind": "crash", "detail": _last_line(exc)})
        return
    try:
        report({"ok": True, "value": value})
    except (TypeError, ValueError) as exc:
        report({"ok": False, "kind": "bad_output", "detail": f"result is not JSON: {_last_line(exc)}"})


if __name__ == "__main__":
    main()
