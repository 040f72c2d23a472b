"""scripts/study/study_gpu_lease.sh's `aside` and `back`: the tracked files over 1 MB leave the tree a device call carries
and come back, a file written again meanwhile (the CPU study's resume state packed during the lease) kept."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "study" / "study_gpu_lease.sh"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts" / "study").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "study" / SCRIPT.name)
    (repo / "studies" / "s" / "resume").mkdir(parents=True)
    (repo / "studies" / "s" / "resume" / "state.pt.xz").write_bytes(os.urandom(1_500_000))
    (repo / "experiments").mkdir()
    (repo / "experiments" / "pilot.db.xz").write_bytes(os.urandom(1_200_000))
    (repo / "small.txt").write_text("stays\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tree"], cwd=repo,
                   check=True)
    return repo


def _lease(repo: Path, verb: str, aside: Path) -> str:
    done = subprocess.run(["bash", "scripts/study/study_gpu_lease.sh", verb], cwd=repo, capture_output=True, text=True,
                          env=os.environ | {"ASIDE": str(aside)}, check=True)
    return done.stdout


def test_aside_moves_only_the_tracked_files_over_one_megabyte_and_back_restores_them(tmp_path: Path) -> None:
    repo, aside = _repo(tmp_path), tmp_path / "aside"
    state = repo / "studies" / "s" / "resume" / "state.pt.xz"
    original = state.read_bytes()
    _lease(repo, "aside", aside)
    assert not state.exists() and not (repo / "experiments" / "pilot.db.xz").exists()
    assert (repo / "small.txt").exists() and (repo / "scripts" / "study" / SCRIPT.name).exists()
    assert (aside / "studies" / "s" / "resume" / "state.pt.xz").read_bytes() == original
    _lease(repo, "back", aside)
    assert state.read_bytes() == original and (repo / "experiments" / "pilot.db.xz").exists()
    assert not aside.exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout == ""


def test_back_keeps_a_file_written_again_while_it_was_aside(tmp_path: Path) -> None:
    repo, aside = _repo(tmp_path), tmp_path / "aside"
    state = repo / "studies" / "s" / "resume" / "state.pt.xz"
    _lease(repo, "aside", aside)
    state.write_bytes(b"packed during the lease")
    out = _lease(repo, "back", aside)
    assert state.read_bytes() == b"packed during the lease"
    assert "kept the newer" in out and (repo / "experiments" / "pilot.db.xz").exists()


def test_back_with_nothing_aside_says_so(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert "nothing aside" in _lease(repo, "back", tmp_path / "never")
