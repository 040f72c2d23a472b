"""How the side-by-side benchmarks measure an engine run as a subprocess: wall time, the CPU of it and every process
it leaves (this process made their child subreaper), peak RSS and the summed PSS of its process tree, and the
processes that outlive it (reaped, killed after a grace)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
SAMPLE_S = 0.5  # how often the memory of an engine's process tree is sampled


def become_subreaper() -> None:
    """Makes this process the reaper of the engines' orphans (a worker that outlives the process that started it),
    so their CPU is counted here (RUSAGE_CHILDREN) instead of being lost to init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("bench: warning: not a child subreaper here; CPU of processes that outlive their parent is not counted")


def parents() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc (zombies included)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):  # it ended meanwhile
                found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return found


def children_of_this_process() -> list[int]:
    return [pid for pid, parent in parents().items() if parent == os.getpid()]


def descendants_pss_mb() -> float:
    """The summed proportional set size of every descendant of this process: memory in use by the engine's whole
    process tree, pages shared between processes (forks, workers) split among them, not counted once each."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents().items():
        children.setdefault(parent, []).append(pid)
    pending, total_kb = list(children.get(os.getpid(), [])), 0
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/smaps_rollup") as rollup:
            total_kb += next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
    return total_kb / 1024


def reap_leftovers(grace_s: float) -> int:
    """Reaps the processes that outlived an engine (reparented here), killing any still running after grace_s;
    returns how many there were."""
    deadline = time.monotonic() + grace_s
    outlived: set[int] = set()
    while left := children_of_this_process():
        outlived.update(left)
        if time.monotonic() > deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.05)
    return len(outlived)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_process(command: list[str], cwd: Path, log: Path, timeout_s: float,
                env: dict[str, str]) -> tuple[float, float, float, float, int]:
    """Runs command to its end: (wall s, CPU s of it and all its descendants, ru_maxrss MB of it and those it
    reaped, peak summed PSS MB of its process tree sampled every SAMPLE_S, processes that outlived it); SystemExit
    with the log's tail when it fails or runs past timeout_s."""
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    tree_mb, sampled = 0.0, 0.0
    try:
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - sampled > SAMPLE_S:
                tree_mb, sampled = max(tree_mb, descendants_pss_mb()), time.perf_counter()
            if time.perf_counter() - started > timeout_s:
                raise SystemExit(f"bench: {command[0]} ran past {timeout_s:g} s; its log: {log}")
            time.sleep(0.02)
    except BaseException:  # past the limit, or Ctrl-C: the engine and every process it left go with the bench
        os.killpg(process.pid, signal.SIGKILL)
        os.wait4(process.pid, 0)
        reap_leftovers(0)
        raise
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    outlived = reap_leftovers(10)
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"bench: {' '.join(command[:3])} ... exited {process.returncode}; log {log}:\n{tail}")
    return wall, children_cpu_s() - cpu_before, usage.ru_maxrss / 1024, tree_mb, outlived
