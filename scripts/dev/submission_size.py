"""How big the commits since the last landing are, as the workplace weighs a submission, before it is refused.

A stop submits the commits on main that the landed main lacks, and is refused whole when they pack to over 512 MiB
or when their diffs, added up as text, pass 256 MiB (a file added in one commit and removed or replaced in a later
one counts twice). A study piece's binary files are what weigh: a training run's resume state (~54 MB packed)
committed twice in one submission counts four times, since each replacement counts the old bytes and the new. One
such refusal lost a whole session's study (2026-11-27). Run it before the stop:

    .venv/bin/python scripts/dev/submission_size.py            # every commit since the landed main, then the totals
    .venv/bin/python scripts/dev/submission_size.py --base REV

It exits 1 when a total is over its safe share of the limit (80 %), with the commits that weigh most.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

MIB = 1 << 20
DIFF_LIMIT = 256 * MIB
PACK_LIMIT = 512 * MIB
SAFE = 0.8
BASES = ("refs/in/main", "origin/main")


def git(*args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], input=data, capture_output=True, check=True).stdout


def default_base() -> str:
    """A ref to the landed main if the clone has one, else where the session's main branch was created (its oldest
    reflog entry: a session's checkout starts at the landed main)."""
    for ref in BASES:
        if subprocess.run(["git", "rev-parse", "--verify", "-q", ref], capture_output=True).returncode == 0:
            return ref
    created = git("reflog", "show", "--format=%H", "main").decode().split()
    if not created:
        raise SystemExit(f"none of {', '.join(BASES)} exists and main has no reflog: give --base REV (the commit "
                         "that landed last)")
    return created[-1]


def commit_diff_bytes(commit: str) -> int:
    """The bytes a commit's diff moves: every removed blob's size plus every added one's (a change counts both)."""
    sizes: list[str] = []
    for line in git("diff-tree", "-r", "--root", "--no-commit-id", "--no-renames", commit).decode().splitlines():
        meta = line.split("\t", 1)[0].split()
        old, new = meta[2], meta[3]
        sizes += [blob for blob in (old, new) if set(blob) != {"0"}]
    if not sizes:
        return 0
    answer = git("cat-file", "--batch-check=%(objectsize)", data="\n".join(sizes).encode() + b"\n").decode()
    return sum(int(size) for size in answer.split())


def pack_bytes(base: str) -> int:
    return len(git("pack-objects", "--revs", "--stdout", "--thin", "-q", data=f"HEAD\n^{base}\n".encode()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=None,
                        help="the landed main (default: refs/in/main, origin/main, or where main was created)")
    args = parser.parse_args()
    base = args.base or default_base()
    commits = git("rev-list", "--reverse", f"{base}..HEAD").decode().split()
    weights = [(commit_diff_bytes(c), c) for c in commits]
    diffs = sum(weight for weight, _ in weights)
    packed = pack_bytes(base)
    print(f"{len(commits)} commits since {base}: diffs {diffs / MIB:.1f} MiB of {DIFF_LIMIT // MIB}, "
          f"packed {packed / MIB:.1f} MiB of {PACK_LIMIT // MIB}")
    for weight, commit in sorted(weights, reverse=True)[:5]:
        if weight >= MIB:
            subject = git("log", "-1", "--format=%s", commit).decode().strip()[:90]
            print(f"  {weight / MIB:7.1f} MiB  {commit[:9]}  {subject}")
    if diffs > SAFE * DIFF_LIMIT or packed > SAFE * PACK_LIMIT:
        print("OVER THE SAFE SHARE: this submission may be refused whole. Fold the commits that replace the same "
              "large file into one (each replacement counts the old bytes and the new).", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
