"""STUDY/study_state.json: the store a study uses and the seconds spent per stage (and per training run), summed over
invocations; the stages under way are counted up to now for `--status` run beside the study.

A stage's seconds are added when it ends (or is interrupted). A study piece lasts hours, so the file also names the
stages under way, since when (wall clock) and which process runs them; a reader adds the time since for a process
that is still alive on this machine, and ignores what a killed process or another machine left there.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from evolve.errors import UserError
from evolve.study.plan import StudyPaths

State = Literal["done", "partial", "to do"]  # where a stage, or one run of it, stands

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class StudyError(UserError):
    """A study that cannot go on as asked (its folder holds work done with other settings, another store)."""


def this_process() -> dict[str, Any]:
    """What names the running process across machines and reboots: host, boot and pid."""
    boot = _BOOT_ID.read_text().strip() if _BOOT_ID.is_file() else ""
    return {"host": socket.gethostname(), "boot": boot, "pid": os.getpid()}


def is_alive(owner: Any) -> bool:
    """Whether `owner` (this_process() as a study wrote it) names a live process of this machine, this boot."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return False
    here = this_process()
    if owner.get("host") != here["host"] or owner.get("boot") != here["boot"]:
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


class StudyState:
    def __init__(self, paths: StudyPaths, read_only: bool = False, clock: Callable[[], float] = time.time) -> None:
        """`read_only` (`--status`): read the file if there is one, create nothing (no folder, no file). `clock`:
        wall-clock seconds, for the stages under way (a reader runs in another process than the study)."""
        self.path, self.clock = paths.state, clock
        data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        stored_db = data.get("db")
        if stored_db is not None and stored_db != paths.db:
            started_in = Path(stored_db).parent
            if not started_in.exists() and started_in.name == paths.folder.name and started_in != paths.folder:
                raise StudyError(f"{paths.folder}: this study was moved from {started_in} (its store and "
                                 "its runs' settings name the paths it was started with): put it back there to run or "
                                 "inspect it (a study started with a relative --out moves with the repository)")
            raise StudyError(f"{paths.folder}: this study's store is {stored_db}; run it with --db {stored_db} "
                             "(or another --out for a new study)")
        self.data: dict[str, Any] = {"db": paths.db, "seconds": data.get("seconds", {})}
        if "redone" in data:  # the evolution cells run again, and why (evolve/study/redo.py)
            self.data["redone"] = data["redone"]
        if read_only:  # a reader counts what the file says is under way; a writer drops what a dead process left
            if "running" in data:
                self.data["running"] = data["running"]
            return
        paths.folder.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file():  # else left alone: the seconds another invocation is adding stay its own
            self.save()

    def save(self) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self.data, indent=1) + "\n")
        partial.replace(self.path)

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        """Add the time inside to `key`'s seconds; while inside, the file names `key` as under way."""
        started = time.monotonic()
        running = self.data.setdefault("running", {"owner": this_process(), "since": {}})
        running["since"][key] = self.clock()
        self.save()
        try:
            yield
        finally:
            seconds = self.data["seconds"]
            seconds[key] = seconds.get(key, 0.0) + time.monotonic() - started
            running["since"].pop(key, None)
            if not running["since"]:
                self.data.pop("running", None)
            self.save()

    def runs_elsewhere(self) -> int | None:
        """For a reader (read_only): the pid of the live process the file names as running a stage of this study;
        None when none does."""
        running = self.data.get("running")
        return running["owner"]["pid"] if isinstance(running, dict) and is_alive(running.get("owner")) else None

    @property
    def redone(self) -> list[dict[str, Any]]:
        """The evolution cells run again (`evolve study --redo`), in order: run, cell, status, reason and time."""
        return self.data.setdefault("redone", [])  # type: ignore[no-any-return]

    @property
    def seconds(self) -> dict[str, float]:
        """The seconds of the stages that ended, per stage."""
        return dict(self.data["seconds"])

    def seconds_now(self) -> dict[str, float]:
        """`seconds` with the stages under way in a live process counted up to now."""
        seconds = self.seconds
        under_way = self.data.get("running")
        since = under_way.get("since") if isinstance(under_way, dict) else None
        if isinstance(since, dict) and is_alive(under_way.get("owner")):
            now = self.clock()
            for key, start in since.items():
                if isinstance(start, int | float):
                    seconds[key] = seconds.get(key, 0.0) + max(0.0, now - start)
        return seconds
