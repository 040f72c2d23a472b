"""A SQLite store packed for a commit and unpacked on another machine: what scripts/study/pilot.sh and
scripts/study/study.sh share for long runs made in pieces (issue 28).

    store_pack.py pack DB DB.xz      # a consistent snapshot (SQLite's backup API, safe while a run writes), xz -9
    store_pack.py unpack DB.xz DB    # DB replaced by the packed one only when that holds more attempts
    store_pack.py attempts DB        # the policy answers stored (calls and failed calls)
"""

from __future__ import annotations

import lzma
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

ANSWER_KINDS = "kind IN ('policy_call', 'policy_error')"  # an attempt that is a policy answer, failed or not
ANSWERS = f"SELECT COUNT(*) FROM attempts WHERE {ANSWER_KINDS}"


def attempts(db: Path) -> int:
    """Policy answers in the store, its WAL included; 0 for a store without the table."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(connection.execute(ANSWERS).fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        connection.close()


def pack(db: Path, packed: Path) -> None:
    """Write `packed` (xz) from one consistent state of `db`, atomically."""
    with tempfile.TemporaryDirectory() as staging:
        snapshot = Path(staging) / "snapshot.db"
        source, target = sqlite3.connect(db), sqlite3.connect(snapshot)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        partial = packed.with_name(packed.name + ".partial")
        with snapshot.open("rb") as raw, lzma.open(partial, "wb", preset=9) as out:
            while chunk := raw.read(1 << 20):
                out.write(chunk)
        os.replace(partial, packed)


def unpack(packed: Path, db: Path) -> bool:
    """Replace `db` (and its WAL) with the packed store when that holds more answers, or when `db` is missing; True
    when it did. A snapshot packed while a run went on is older than the live store it came from."""
    staging = db.with_name(db.name + ".unpacked")
    with lzma.open(packed, "rb") as source, staging.open("wb") as out:
        while chunk := source.read(1 << 20):
            out.write(chunk)
    try:
        if db.is_file() and attempts(staging) <= attempts(db):
            return False
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        os.replace(staging, db)
        return True
    finally:
        for leftover in (staging, Path(f"{staging}-wal"), Path(f"{staging}-shm")):
            leftover.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "pack":
        pack(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 3 and argv[0] == "unpack":
        print("unpacked" if unpack(Path(argv[1]), Path(argv[2])) else "kept the local store (it holds as much)")
    elif len(argv) == 2 and argv[0] == "attempts":
        print(attempts(Path(argv[1])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
