"""scripts/dev/submission_size.py weighs the commits since the landed main as the workplace does: a replaced binary
counts its old bytes and its new ones, and a submission past the safe share of a limit exits 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev" / "submission_size.py"
MIB = 1 << 20


def git(repo: Path, *args: str) -> str:
    env = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


def commit_file(repo: Path, name: str, size: int, message: str) -> None:
    (repo / name).write_bytes(os.urandom(size))
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


def weigh(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=repo, capture_output=True, text=True)


def test_a_replaced_file_counts_its_old_and_new_bytes_since_where_main_was_created(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    commit_file(tmp_path, "landed.bin", MIB, "landed")  # the reflog's first entry: what landed
    commit_file(tmp_path, "state.bin", 2 * MIB, "piece 1")
    commit_file(tmp_path, "state.bin", 2 * MIB, "piece 2")  # replaced: 2 MiB out, 2 MiB in
    result = weigh(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 commits since" in result.stdout and "diffs 6.0 MiB of 256" in result.stdout
    assert "piece 2" in result.stdout and "4.0 MiB" in result.stdout


def test_past_the_safe_share_it_exits_1_and_says_why(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    commit_file(tmp_path, "a.txt", 10, "landed")
    base = git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "big.bin").write_bytes(b"\0" * (210 * MIB))  # packs small, but its diff counts 210 MiB
    git(tmp_path, "add", "big.bin")
    git(tmp_path, "commit", "-q", "-m", "a large file")
    result = weigh(tmp_path, "--base", base)
    assert result.returncode == 1
    assert "diffs 210.0 MiB of 256" in result.stdout and "may be refused whole" in result.stderr
