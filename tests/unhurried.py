"""Shipped problems with every time limit multiplied ([limits] time_scale), for tests that check answers, not speed:
a known-good solution within its limits on an idle machine can overrun them on a loaded one."""

from __future__ import annotations

import shutil
from pathlib import Path

from evolve.problems.problem import Problem, load_problem

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
TIME_SCALE = 10


def unhurried(name: str, folder: Path, time_scale: float = TIME_SCALE) -> Problem:
    """The shipped problem `name`, copied under `folder` with [limits] time_scale set; the evaluation worker reads
    its problem.toml from there, so the scale reaches every timed call."""
    copy = folder / "unhurried" / name
    shutil.copytree(PROGRAMS / name, copy)
    toml = copy / "problem.toml"
    text = toml.read_text()
    line = f"time_scale = {time_scale}"
    toml.write_text(text.replace("[limits]\n", f"[limits]\n{line}\n", 1) if "[limits]\n" in text
                    else f"{text.rstrip()}\n\n[limits]\n{line}\n")
    return load_problem(name, copy.parent)
