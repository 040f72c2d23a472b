"""Process containment for the sandbox: a cgroup per run, a spare uid, and killing every process of a run.

Used by evolve/sandbox/core.py; see its docstring for how these layers fit together.
"""

from __future__ import annotations

import os
import secrets
import signal
import stat
import time
from pathlib import Path

SPARE_UIDS = (1_000_000, 1_000_000_000)  # a run's own uid is drawn from here (root without cgroups)

def others_can_read(path: str | Path, mode: int = stat.S_IROTH) -> bool:
    """Whether any uid can reach `path` (every parent directory searchable by others) and has `mode` on it."""
    try:
        current = Path(path).resolve()
        if not os.stat(current).st_mode & mode:
            return False
        return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in current.parents)
    except OSError:
        return False


def mapped_ids(map_path: str) -> list[range]:
    try:
        lines = Path(map_path).read_text().split("\n")
    except OSError:
        return []
    return [range(int(f[0]), int(f[0]) + int(f[2])) for f in (line.split() for line in lines) if len(f) == 3]


def spare_uid() -> int | None:
    """A random uid (used as gid too) that this user namespace maps and nothing is likely to use: drawn from
    SPARE_UIDS, or where the namespace maps none of those (a container's 65,536 ids), from the upper half of the
    largest range it maps, above 1000. None where nothing qualifies."""
    maps = mapped_ids("/proc/self/uid_map"), mapped_ids("/proc/self/gid_map")
    pools = [range(*SPARE_UIDS)]
    widest = max((ids for ids in maps[0] if len(ids) > 2000), key=len, default=None)
    if widest is not None:
        pools.append(range(max(1001, widest.start + len(widest) // 2), widest.stop - 2))  # below nobody (65534)
    for pool in pools:
        for _ in range(20):
            uid = pool[secrets.randbelow(len(pool))] if len(pool) else -1
            if uid >= 0 and all(any(uid in ids for ids in ranges) for ranges in maps):
                return uid
    return None


def processes() -> list[tuple[int, int, str]]:
    """(pid, real uid, state) of every process."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = dict(line.split(":", 1) for line in Path(entry.path, "status").read_text().splitlines())
                found.append((int(entry.name), int(fields["Uid"].split()[0]), fields["State"].split()[0]))
            except (OSError, KeyError, ValueError, IndexError):
                continue
    return found


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` until none is left (its RLIMIT_NPROC keeps that finite)."""
    for _ in range(200):
        living = [pid for pid, owner, state in processes() if owner == uid and state != "Z"]
        if not living:
            return
        kill(living)
        time.sleep(0.002)


def own_cgroups() -> list[tuple[list[str], str]]:
    """(controllers, path) of each hierarchy this process belongs to, from /proc/self/cgroup ([] for cgroup v2's)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    entries = [line.split(":", 2) for line in lines]
    return [(controllers.split(",") if controllers else [], where.lstrip("/")) for _, controllers, where in entries]


def cgroup_parents() -> list[Path]:
    """Where a run's cgroup may go, best first: under this process's own pids cgroup (v1), then its
    cgroup v2 (pure, or the hybrid layout's "unified" tree)."""
    parents = []
    for controllers, where in own_cgroups():
        if "pids" in controllers:
            parents.insert(0, Path("/sys/fs/cgroup/pids", where))
        elif not controllers:
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (root / "cgroup.controllers").exists():
                    parents.append(root / where)
    return parents


def memory_v1_parent() -> Path | None:
    """This process's cgroup in a v1 memory hierarchy (the hybrid layout), None where there is none."""
    return next((Path("/sys/fs/cgroup/memory", where) for controllers, where in own_cgroups()
                 if "memory" in controllers), None)


class RunCgroup:
    """A cgroup for one run, nested under the caller's own: it finds (and kills) every process of the run, setsid
    or not; where the pids controller is available (`capped`), it also caps their number. Where a memory
    controller is available (v2 in the same cgroup, or v1's memory hierarchy beside it), `memory` is the cgroup
    whose limit counts what the kernel charges the run: its pages, page cache, tmpfs and memfd files, pipe buffers
    and other kernel memory; past the limit the kernel's OOM killer ends the run (`oom_killed`)."""

    def __init__(self, path: Path, capped: bool, memory: Path | None = None, v2: bool = False) -> None:
        self.path = path
        self.capped = capped
        self.memory = memory
        self.v2 = v2  # a cgroup v2 folder: a fork server may clone a child straight into it (CLONE_INTO_CGROUP)

    @classmethod
    def create(cls, parents: list[Path], maxprocesses: int, memory_bytes: int | None = None) -> RunCgroup | None:
        for parent in parents:
            if not os.access(parent, os.W_OK):
                continue
            cls._remove_stale(parent)
            path = parent / f"evolve-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
            except OSError:
                continue
            v2 = (parent / "cgroup.controllers").exists()
            try:
                (path / "pids.max").write_text(str(maxprocesses))
                cgroup = cls(path, capped=True, v2=v2)
            except OSError:
                if not v2:
                    cls(path, capped=False).kill_all_and_remove()
                    continue
                cgroup = cls(path, capped=False, v2=True)  # v2 without the pids controller: tracks, no cap
            if memory_bytes is not None:
                cgroup.memory = cgroup._limit_memory(parent, memory_bytes)
            return cgroup
        return None

    def _limit_memory(self, parent: Path, memory_bytes: int) -> Path | None:
        """The memory cgroup of this run with its limit set, None where no memory controller is writable."""
        try:
            v2_memory = "memory" in (parent / "cgroup.subtree_control").read_text().split()
        except OSError:  # a v1 hierarchy
            v2_memory = False
        if v2_memory:
            try:
                (self.path / "memory.max").write_text(str(memory_bytes))
                swap = self.path / "memory.swap.max"
                if swap.exists():
                    swap.write_text("0")
                return self.path
            except OSError:
                return None
        v1 = memory_v1_parent()
        if v1 is None or not os.access(v1, os.W_OK):
            return None
        self._remove_stale(v1)
        path = v1 / self.path.name
        try:
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
            both = path / "memory.memsw.limit_in_bytes"
            if both.exists():
                both.write_text(str(memory_bytes))
        except OSError:
            _remove_cgroup(path)
            return None
        return path

    @classmethod
    def _remove_stale(cls, parent: Path) -> None:
        """Empty the cgroups of runs whose process died without cleaning up (killed with SIGKILL)."""
        for entry in parent.glob("evolve-sandbox-*-*"):
            owner = entry.name.split("-")[2]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                cls(entry, capped=False).kill_all_and_remove()

    def add(self, pid: int, placed: bool = False) -> bool:
        """Put `pid` in the run's cgroup (unless it was `placed` there when it was forked) and in its v1 memory
        cgroup, where that is another one."""
        try:
            if not placed:
                (self.path / "cgroup.procs").write_text(str(pid))
            if self.memory is not None and self.memory != self.path:
                (self.memory / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def pids(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer killed a process of this run at its memory limit."""
        if self.memory is None:
            return False
        name = "memory.events" if self.memory == self.path else "memory.oom_control"
        try:
            fields = dict(line.split() for line in (self.memory / name).read_text().splitlines() if line.strip())
        except (OSError, ValueError):
            return False
        return int(fields.get("oom_kill", "0")) > 0

    def kill_all(self) -> None:
        kill_file = self.path / "cgroup.kill"  # cgroup v2, Linux >= 5.14: atomic
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        for _ in range(500):  # v1: kill what is there until nothing is left; pids.max bounds the refills
            pids = self.pids()
            if not pids:
                return
            kill(pids)
            time.sleep(0.001)

    def kill_all_and_remove(self) -> None:
        self.kill_all()
        _remove_cgroup(self.path)
        if self.memory is not None and self.memory != self.path:
            _remove_cgroup(self.memory)


def _remove_cgroup(path: Path) -> None:
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)
