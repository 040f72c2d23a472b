"""An evaluator worker's process tree: it is the subreaper of what it starts, finds what an evaluation left running
(daemons that called setsid included) and kills it before it answers; the engine kills a worker's whole session."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Collection
from types import FrameType

_LEFTOVER_ROUNDS = 50  # kill-and-look rounds for what an evaluation left (each round's orphans come back to us)
_PR_SET_CHILD_SUBREAPER = 36


class Stopped(BaseException):
    """Raised in the worker on SIGTERM so that the sandbox's cleanup (temporary folders) still runs."""


def signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _processes() -> list[tuple[int, int, int, int]]:
    """(pid, parent pid, process group, session) of every process this one can see in /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                parent, group, session = handle.read().rsplit(")", 1)[1].split()[1:4]
            found.append((int(entry.name), int(parent), int(group), int(session)))
        except (OSError, IndexError, ValueError):
            continue
    return found


def kill_session(session: int) -> None:
    """SIGKILL every process of the session `session` (the engine's view of a worker started in a session of its
    own: what the evaluator started and left there, even in another process group)."""
    for pid, _, _, sid in _processes():
        if sid == session:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def become_subreaper() -> None:
    """Make this worker the child subreaper of what it starts (Linux): a process the evaluator detaches (a double
    fork, setsid) becomes this worker's child when its parent exits, instead of init's, so end_leftovers finds it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process group is all that is ended
        pass


def _below(me: int, table: list[tuple[int, int, int, int]], keep: Collection[int]) -> list[tuple[int, int]]:
    """(pid, parent) of every process under `me` in `table`, leaving out the subtrees of `keep`."""
    children: dict[int, list[int]] = {}
    for pid, parent, _, _ in table:
        children.setdefault(parent, []).append(pid)
    found: list[tuple[int, int]] = []
    stack = [me]
    while stack:
        parent = stack.pop()
        for pid in children.get(parent, []):
            if pid not in keep and pid != me:
                found.append((pid, parent))
                stack.append(pid)
    return found


def _children() -> set[int] | None:
    """The pids of this process's children, every thread's (/proc/self/task/*/children: one small read instead of a
    scan of every process), None where the kernel does not list them. As a subreaper this process is the parent of
    whatever it started and was orphaned, so no child but the kept ones means nothing of its is left."""
    found: set[int] = set()
    try:
        for task in os.scandir("/proc/self/task"):
            with open(f"{task.path}/children") as handle:
                found.update(int(pid) for pid in handle.read().split())
    except (OSError, ValueError):
        return None
    return found


def end_leftovers(keep: Collection[int] = ()) -> None:
    """Kill every process below this worker but the subtrees of `keep` (a warm worker's sandbox fork server), and
    reap those that are its children: what an evaluation left running, daemons that called setsid included (they
    come back to this worker, a subreaper, when their parent dies). Called before the worker answers, so the engine
    takes an answer only once nothing of that evaluation runs on."""
    me = os.getpid()
    children = _children()
    if children is not None and not children - set(keep):  # nothing below this subreaper but `keep`: no scan
        return
    kill_group = {pid for pid, _, group, _ in _processes() if group == me and pid != me and pid not in keep}
    for _ in range(_LEFTOVER_ROUNDS):
        below = [(pid, parent) for pid, parent in _below(me, _processes(), keep)] + \
            [(pid, -1) for pid in kill_group]
        kill_group = set()
        if not below:
            return
        for pid, _ in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid, parent in below:
            if parent == me:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def stop_children(signum: int, frame: FrameType | None) -> None:
    """SIGTERM from the engine: kill each sandbox child's process group, then unwind the worker (the sandbox removes
    its folders on the way; whoever catches Stopped then ends what is left below the worker: end_leftovers)."""
    me = os.getpid()
    for pid, parent, _, _ in _processes():
        if parent == me:
            signal_group(pid, signal.SIGKILL)  # the sandbox starts each child in its own group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    raise Stopped
