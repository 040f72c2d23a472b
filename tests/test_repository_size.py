"""What a clone downloads stays small: no finished training's optimizer state is tracked, an unfinished one's only as a
study commits it between pieces, and no tracked file is over 10 MB but the kinds a study commits on purpose (issue 58:
resume states once put 551 MB into the history)."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
LIMIT = 10 * MB
# committed on purpose, each with its own ceiling: a study's LoRA adapters (the trained result; 19.6 MB for the
# 135M model) and its packed store (scripts/study/store_pack.py; 10.5 MB for the finished CPU study)
ALLOWED = {"studies/*/checkpoints/*/final/adapter/adapter_model.safetensors": 25 * MB,
           "studies/*/study.db.xz": 25 * MB}
OPTIMIZER_STATES = ("*.pt", "*.pt.xz", "*.pth", "*optimizer*")
# a study's unfinished training run, packed by scripts/study/study.sh for the next piece on a fresh machine
UNFINISHED_RESUME_STATE = "studies/*/checkpoints/*/resume/state.pt.xz"
# where evolve/rl/checkpoints.py writes a resume state, and a checkpoint folder's optimizer: never tracked
WOULD_BE_WRITTEN = ("studies/study_cpu/checkpoints/vpo-t0/resume/state.pt", "checkpoints/run/resume/state.pt",
                    "checkpoints/run/resume/state.pt.xz", "experiments/out/optimizer.pt")


def _git(*args: str, given: str | None = None) -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(["git", *args], cwd=ROOT, input=given, capture_output=True, text=True, check=True).stdout


def _tracked_sizes() -> dict[str, int]:
    """Every tracked path with the size of its blob in the index (what the next commit holds)."""
    entries = [line.split("\t", 1) for line in _git("ls-files", "--stage").splitlines()]
    blobs = [(meta.split()[1], path) for meta, path in entries if meta.split()[0] != "160000"]  # no submodules
    sizes = _git("cat-file", "--batch-check=%(objectsize)", given="".join(f"{blob}\n" for blob, _ in blobs))
    return {path: int(size) for (_, path), size in zip(blobs, sizes.split(), strict=True)}


def _ceiling(path: str) -> int:
    return max([limit for pattern, limit in ALLOWED.items() if fnmatch.fnmatchcase(path, pattern)], default=LIMIT)


def test_no_optimizer_state_is_tracked_but_an_unfinished_study_training_s() -> None:
    tracked = _tracked_sizes()
    states = [path for path in tracked if any(fnmatch.fnmatchcase(Path(path).name, p) for p in OPTIMIZER_STATES)]
    stray = [path for path in states if not fnmatch.fnmatchcase(path, UNFINISHED_RESUME_STATE)]
    finished = [path for path in states if fnmatch.fnmatchcase(path, UNFINISHED_RESUME_STATE)
                and any(other.startswith(str(Path(path).parents[1] / "final") + "/") for other in tracked)]
    assert stray == [] and finished == []


def test_no_tracked_file_is_over_ten_megabytes_but_what_a_study_commits() -> None:
    large = {path: size for path, size in _tracked_sizes().items() if size > _ceiling(path)}
    assert large == {}


def test_gitignore_keeps_every_optimizer_state_out_but_a_study_s_packed_resume_state() -> None:
    ignored = _git("check-ignore", "--no-index", "--stdin", given="\n".join(WOULD_BE_WRITTEN) + "\n").split()
    assert sorted(ignored) == sorted(WOULD_BE_WRITTEN)
    kept = _git("check-ignore", "--no-index", "--stdin", "--verbose", "--non-matching",
                given="studies/study_next/checkpoints/vpo-t0/resume/state.pt.xz\n")
    assert kept.startswith(".gitignore:") and "!" in kept.split("\t")[0]
