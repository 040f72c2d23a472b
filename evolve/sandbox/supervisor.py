"""One running sandbox child, seen from the trusted side: its pipes, what it wrote, timed calls, and its end.

evolve/sandbox/core.py starts the child (see its docstring for the confinement); RunningChild reads its output
under the caps, sends it the calls of a session and times each round trip, kills every process of the run
and turns how it ended into a SandboxResult. While it waits on the child it also sums what the candidate keeps
in its folder (allocated blocks, every file and folder) a few times a second and stops it past the write cap:
the cap where the child could not mount a tmpfs of that size over its folder (evolve/sandbox/_isolation.py).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from evolve.sandbox.forkserver import ForkedChild
from evolve.sandbox.processes import RunCgroup, kill_uid

SandboxStatus = Literal["ok", "timeout", "memory", "crash", "bad_output"]
_FAILURES = ("timeout", "memory", "crash", "bad_output")
_WRITE_CHECK_S = 0.05  # how often the candidate's folder is summed while the child runs
MAX_FOLDER_ENTRIES = 20_000  # files and folders in the candidate's folder; past it the run is bad_output too


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mb: int = 1024  # address-space cap of the child
    max_processes: int = 64  # processes and threads at once; fork bombs die
    max_output_bytes: int = 1_000_000  # stdout + stderr + result; past it the run is bad_output
    max_written_mb: int = 64  # what the candidate keeps in its folder, all files together; past it bad_output
    preload: tuple[str, ...] = ()  # modules the fork server imports once, before forking each child
    fork_server: bool = True  # fork each child from a warm server (evolve/sandbox/forkserver.py), not a new python
    fresh_children_first: int = 1  # children a Sandbox starts fresh before its server: one call never starts one
    time_scale: float = 1.0  # multiplies every time limit (wall, CPU and each timed call's): a slow or loaded machine

    def in_force(self) -> SandboxLimits:
        """These limits with time_scale applied to the wall and CPU limits (and then 1: never applied twice); a
        Sandbox keeps the scale itself for each timed call's limit."""
        return replace(self, wall_time_s=self.wall_time_s * self.time_scale,
                       cpu_time_s=self.cpu_time_s * self.time_scale, time_scale=1.0)


@dataclass(frozen=True)
class SandboxResult:
    status: SandboxStatus
    value: Any = None  # JSON-decoded return value when status == "ok"
    detail: str = ""  # one-line reason when not ok
    stdout: str = ""  # at most max_output_bytes
    stderr: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class RunningChild:
    """One started child process: its pipes, its confinement, what it wrote so far, and how to end it."""

    def __init__(self, process: subprocess.Popen[bytes] | ForkedChild, workdir: Path, cgroup: RunCgroup | None,
                 uid: int | None, result_read: int, request_write: int, limits: SandboxLimits) -> None:
        self.process, self.workdir, self.cgroup, self.uid = process, workdir, cgroup, uid
        self.result_read, self.request_write, self.limits = result_read, request_write, limits
        self.streams = {"stdout": bytearray(), "stderr": bytearray(), "result": bytearray()}
        self.dead = False
        self._next_write_check = 0.0
        self._pidfd = process.pidfd if isinstance(process, ForkedChild) else os.pidfd_open(process.pid)
        self._selector = selectors.DefaultSelector()
        assert process.stdout is not None and process.stderr is not None
        self._selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        self._selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        self._selector.register(result_read, selectors.EVENT_READ, "result")
        self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")
        if request_write >= 0:
            os.set_blocking(request_write, False)

    def read(self, deadline: float, until_line: bool = False, send: bytes = b"") -> str:
        """Read the pipes into `streams` (writing `send` to the request pipe meanwhile) until a whole result
        line is in (with until_line: "line"), the child exits or, once that is no longer watched, every pipe
        is closed ("exit"), the deadline ("timeout"), the output cap ("overflow") or the write cap ("written")."""
        pending = memoryview(send)
        if pending:
            self._selector.register(self.request_write, selectors.EVENT_WRITE, "request")
        try:
            while True:
                if until_line and b"\n" in self.streams["result"]:
                    return "line"
                now = time.monotonic()
                if now >= self._next_write_check:
                    self._next_write_check = now + _WRITE_CHECK_S
                    if self.over_write_cap():
                        return "written"
                remaining = deadline - now
                if remaining <= 0:
                    return "timeout"
                if not self._selector.get_map():
                    return "exit"
                for key, _ in self._selector.select(timeout=min(remaining, _WRITE_CHECK_S)):
                    if key.data == "exit":
                        return "exit"
                    if key.data == "request":
                        try:
                            pending = pending[os.write(self.request_write, pending):]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:  # the child closed its end: its reply (or exit) tells the rest
                            pending = pending[:0]
                        if not pending:
                            self._selector.unregister(self.request_write)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        self._selector.unregister(key.fileobj)
                        continue
                    room = self.limits.max_output_bytes - sum(len(buffer) for buffer in self.streams.values())
                    self.streams[key.data].extend(chunk[:room])
                    if len(chunk) > room:
                        return "overflow"
        finally:
            if self.request_write >= 0 and self.request_write in self._selector.get_map():
                self._selector.unregister(self.request_write)

    def take_line(self) -> dict[str, Any] | None:
        """The first result line as a JSON object (None when it is not one), removed from the buffer."""
        line, _, rest = bytes(self.streams["result"]).partition(b"\n")
        self.streams["result"] = bytearray(rest)
        return parse_result(line)

    def wait_ready(self, deadline: float, started: float) -> SandboxResult | None:
        """None once the candidate is imported and the child serves calls, else the failure to report."""
        outcome = self.read(deadline, until_line=True)
        if outcome == "line":
            message = self.take_line()
            if message is not None and message.get("ready") is True:
                return None
            return self._from_message(message, started) if message is not None else \
                self.conclude("exit", started)
        return self.conclude(outcome, started)

    def serve(self, payload: Any, limit_s: float, deadline: float) -> SandboxResult:
        """One call, timed from the first byte of its request to the end of its answer."""
        request = json.dumps(payload).encode() + b"\n"  # encoded before the clock starts
        self.streams["result"].clear()
        marks = {name: len(self.streams[name]) for name in ("stdout", "stderr")}
        started = time.monotonic()
        outcome = self.read(min(started + limit_s, deadline), until_line=True, send=request)
        took = time.monotonic() - started
        if outcome == "line":
            message = self.take_line()
            if message is not None and "ok" in message:
                return self._from_message(message, started, marks, took)
            outcome = "garbled"
        if outcome == "timeout" and started + limit_s <= deadline:
            self.kill()  # the session reaps it and starts another for the next call
            return self._result("timeout", f"ran past its time limit of {limit_s:g}s", marks=marks, wall_s=took)
        if outcome == "garbled":
            self.kill()
            return self._result("bad_output", "the reply was not a result line", marks=marks, wall_s=took)
        if outcome == "written":
            self.kill()
            return self._result("bad_output", self.write_cap_detail(), marks=marks, wall_s=took)
        return self.conclude(outcome, started, marks)

    def _from_message(self, message: dict[str, Any], started: float, marks: dict[str, int] | None = None,
                      wall_s: float | None = None) -> SandboxResult:
        took = time.monotonic() - started if wall_s is None else wall_s
        if message.get("ok") is True:
            return self._result("ok", value=message.get("value"), marks=marks, wall_s=took)
        kind = message.get("kind")
        detail = message.get("detail")
        return self._result(kind if kind in _FAILURES else "crash", detail[:500] if isinstance(detail, str) else "",
                            marks=marks, wall_s=took)

    def _result(self, status: SandboxStatus, detail: str = "", value: Any = None, marks: dict[str, int] | None = None,
                wall_s: float = 0.0) -> SandboxResult:
        marks = marks or {}
        stdout, stderr = (bytes(self.streams[name][marks.get(name, 0):]).decode(errors="replace")
                          for name in ("stdout", "stderr"))
        return SandboxResult(status, value, detail, stdout, stderr, wall_s)

    def conclude(self, outcome: str, started: float, marks: dict[str, int] | None = None) -> SandboxResult:
        """Kill what is left of the child and turn how it ended (a read() outcome) into a result; `marks` say
        where this call's stdout and stderr begin."""
        limits = self.limits
        self.kill()
        if outcome == "exit":  # what is still in the pipes, now that every writer is dead
            drained = self.read(time.monotonic() + 0.1)
            outcome = drained if drained in ("overflow", "written") else "exit"
            if outcome == "exit" and self.over_write_cap():  # what it wrote since the last check
                outcome = "written"
        cpu_s = self.reap()

        def result(status: SandboxStatus, detail: str) -> SandboxResult:
            return self._result(status, detail, marks=marks, wall_s=time.monotonic() - started)

        if outcome == "timeout":
            return result("timeout", f"wall-clock limit of {limits.wall_time_s:g}s exceeded")
        if outcome == "overflow":
            return result("bad_output", f"output over the {limits.max_output_bytes}-byte cap")
        if outcome == "written":
            return result("bad_output", self.write_cap_detail())
        message = parse_result(bytes(self.streams["result"]))
        if message is not None and "ok" in message:
            return self._from_message(message, started, marks)
        returncode = self.process.returncode
        if self.cgroup is not None and self.cgroup.oom_killed():
            return result("memory", f"over its memory limit of {limits.memory_mb + limits.max_written_mb} MiB "
                                    "(memory, files and kernel buffers, as the kernel counts them)")
        if returncode < 0:
            name = signal_name(-returncode)
            if -returncode == signal.SIGXCPU or cpu_s >= limits.cpu_time_s:
                return result("timeout", f"CPU limit of {limits.cpu_time_s:g}s exceeded ({name})")
            return result("crash", f"killed by {name}")
        if self.streams["result"].strip():
            return result("bad_output", "the result pipe held something other than one result line")
        stderr = bytes(self.streams["stderr"]).decode(errors="replace")
        if "MemoryError" in stderr or "memory allocation" in stderr.lower():  # e.g. OpenBLAS at import
            return result("memory", "memory allocation failed")
        return result("crash", f"exit code {returncode} without a result")

    def over_write_cap(self) -> bool:
        used, entries = folder_usage(self.workdir, MAX_FOLDER_ENTRIES)
        return used > self.limits.max_written_mb * 1024 * 1024 or entries > MAX_FOLDER_ENTRIES

    def write_cap_detail(self) -> str:
        return f"wrote over its write cap: {self.limits.max_written_mb} MiB or {MAX_FOLDER_ENTRIES} files in its folder"

    def kill(self) -> None:
        """SIGKILL the child's whole process group (before it is reaped, so the group id is still ours),
        then every process in its cgroup or, failing that, every process of its uid."""
        self.dead = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all()
        elif self.uid is not None:
            kill_uid(self.uid)
        if self._pidfd in self._selector.get_map():
            self._selector.unregister(self._pidfd)

    def reap(self) -> float:
        """Wait for the (killed) child; set its returncode and return its CPU seconds."""
        if isinstance(self.process, ForkedChild):
            return self.process.reap()
        _, wait_status, usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(wait_status)
        return usage.ru_utime + usage.ru_stime

    @property
    def server_lost(self) -> bool:
        """Whether the fork server this child came from died before the child's end (which then killed it)."""
        return isinstance(self.process, ForkedChild) and self.process.server_lost

    def close(self) -> None:
        """Kill and reap the child if that is not done yet, close every pipe, remove its cgroup and directory."""
        if self.process.returncode is None:
            self.kill()
            self.reap()
        self._selector.close()
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        self.process.stderr.close()
        for fd in (self.result_read, self.request_write, self._pidfd):
            if fd >= 0:
                os.close(fd)
        if self.cgroup is not None:
            self.cgroup.kill_all_and_remove()
        remove_folder(self.workdir)


def folder_usage(folder: Path, max_entries: int) -> tuple[int, int]:
    """(bytes allocated, entries) under `folder`, counting stops past max_entries. A folder the candidate made
    unreadable to its owner (same uid as this process) is made readable again first, so it cannot hide files."""
    used, entries = 0, 0
    pending = [str(folder)]
    while pending and entries <= max_entries:
        current = pending.pop()
        try:
            listing = list(os.scandir(current))
        except PermissionError:
            try:
                os.chmod(current, 0o700)
                listing = list(os.scandir(current))
            except OSError:
                continue
        except OSError:
            continue
        for entry in listing:
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            used += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return used, entries


def remove_folder(folder: Path) -> None:
    """Remove a candidate's folder, including parts it made unreadable or unwritable to its owner. Nothing
    outside `folder` is touched: a folder already gone (another process cleaning stale folders got there first)
    is left at that, and the folder's parent keeps its mode (as root, the parent is /tmp)."""
    top = os.path.abspath(folder)

    def unlock_and_retry(function: Callable[..., object], path: str, _: object) -> None:
        path = os.path.abspath(path)
        if not path.startswith(top + os.sep) or not os.path.lexists(path):
            return  # the folder itself (gone, or not empty after the retries below) or an entry already gone
        try:
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)  # raises where this process may not: then there is nothing more to try
                remove_folder(Path(path))
            else:
                os.unlink(path)
        except OSError:
            pass

    shutil.rmtree(top, onerror=unlock_and_retry)
    if os.path.isdir(top) and not os.path.islink(top):  # the candidate locked the folder itself: unlock, once more
        try:
            os.chmod(top, 0o700)
        except OSError:
            return
        shutil.rmtree(top, onerror=unlock_and_retry)


def parse_result(raw: bytes) -> dict[str, Any] | None:
    """The JSON object when `raw` is exactly one line holding one, else None: the harness writes one line per
    call, so anything more was written by the candidate. Bytes from the candidate never raise here."""
    lines = raw.decode(errors="replace").splitlines()
    if len(lines) != 1:
        return None
    try:
        message = json.loads(lines[0])
    except (ValueError, RecursionError, MemoryError):  # deeply nested lines exhaust the parser's stack
        return None
    return message if isinstance(message, dict) else None
