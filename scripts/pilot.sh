#!/usr/bin/env bash
# The calibration pilot (issue 28, experiments/calibration/) in pieces, one machine after another:
#   bash scripts/pilot.sh start    # unpack the committed store if it is newer, import HumanEval, run in the background
#   bash scripts/pilot.sh status   # answers so far, cells finished, whether it runs
#   bash scripts/pilot.sh save     # Ctrl-C the pilot (it stops resumable), pack its store into pilot.db.xz
# then commit experiments/calibration/pilot.db.xz. `start` again on any machine carries on where `save` left off.
set -euo pipefail
cd "$(dirname "$0")/.."
FOLDER=experiments/calibration
DB=$FOLDER/pilot.db
PACKED=$DB.xz
LOG=${EVOLVE_PILOT_LOG:-/tmp/evolve-pilot.log}
PATTERN="evolve experiment $FOLDER/pilot.toml"

counts() {
    .venv/bin/python - "$DB" <<'EOF'
import sqlite3, sys
store = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
answers = store.execute("SELECT COUNT(*) FROM attempts WHERE kind IN ('policy_call', 'policy_error')").fetchone()[0]
status = dict(store.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
print(f"{answers} answers; cells: " + ", ".join(f"{count} {name}" for name, count in sorted(status.items())))
EOF
}

case "${1:-}" in
start)
    if pgrep -f "$PATTERN" >/dev/null; then echo "the pilot already runs (log: $LOG)"; exit 0; fi
    [ -x .venv/bin/evolve ] || bash scripts/install.sh
    [ -d programs/humaneval ] || .venv/bin/evolve import humaneval
    if [ ! -f "$DB" ] || [ "$PACKED" -nt "$DB" ]; then
        xz -dc "$PACKED" > "$DB.unpacked" && mv "$DB.unpacked" "$DB"
        rm -f "$DB-wal" "$DB-shm"
    fi
    echo "from: $(counts)"
    nohup .venv/bin/evolve experiment "$FOLDER/pilot.toml" --plain >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/pilot.sh save"
    ;;
status)
    echo "$(counts); $(pgrep -f "$PATTERN" >/dev/null && echo running || echo 'not running')"
    ;;
save)
    if pgrep -f "$PATTERN" >/dev/null; then
        pkill -INT -of "$PATTERN"  # the oldest match: the command, not its sandboxed evaluators
        for _ in $(seq 1 120); do pgrep -f "$PATTERN" >/dev/null || break; sleep 1; done
        if pgrep -f "$PATTERN" >/dev/null; then echo "the pilot did not stop in 120 s; nothing packed" >&2; exit 1; fi
    fi
    snapshot=$(mktemp --suffix=.db)
    .venv/bin/python -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
        "$DB" "$snapshot"
    xz -9 -T2 -c "$snapshot" > "$PACKED.new" && mv "$PACKED.new" "$PACKED"
    rm -f "$snapshot"
    echo "packed $PACKED ($(du -h "$PACKED" | cut -f1)): $(counts)"
    echo "commit it: git add $PACKED && git commit -m '...' -- $PACKED"
    ;;
*)
    echo "usage: bash scripts/pilot.sh start|status|save" >&2
    exit 2
    ;;
esac
