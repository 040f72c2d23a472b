#!/usr/bin/env bash
# The calibration pilot (issue 28, experiments/calibration/) in pieces, one machine after another:
#   bash scripts/pilot.sh start    # unpack the committed store if it holds more, import HumanEval, run in the background
#   bash scripts/pilot.sh status   # answers so far, cells finished, whether it runs
#   bash scripts/pilot.sh save     # Ctrl-C the pilot (it stops resumable), pack its store into pilot.db.xz
#   bash scripts/pilot.sh pack     # pack a consistent snapshot of the store while the pilot goes on
# then commit experiments/calibration/pilot.db.xz. `start` again on any machine carries on where `save` left off.
set -euo pipefail
cd "$(dirname "$0")/.."
FOLDER=experiments/calibration
DB=$FOLDER/pilot.db
PACKED=$DB.xz
LOG=${EVOLVE_PILOT_LOG:-/tmp/evolve-pilot.log}
PATTERN="evolve experiment $FOLDER/pilot.toml"

counts() {
    .venv/bin/python - "$DB" "$@" <<'EOF'
import sqlite3, sys, tomllib
store = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
answers = store.execute("SELECT COUNT(*) FROM attempts WHERE kind IN ('policy_call', 'policy_error')").fetchone()[0]
status = dict(store.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
print(f"{answers} answers; cells: " + ", ".join(f"{count} {name}" for name, count in sorted(status.items())))
if len(sys.argv) > 2:  # status: the pace of the last half hour and, at it, the most that is left
    design = tomllib.loads(open(sys.argv[2]).read())
    planned = len(design["problems"]) * len(design["seeds"])
    unfinished = planned - status.get("finished", 0)
    spent = store.execute("SELECT COALESCE(SUM(a.n), 0) FROM runs r JOIN (SELECT run_id, COUNT(*) n FROM attempts "
                          "WHERE kind IN ('policy_call', 'policy_error') GROUP BY run_id) a ON a.run_id = r.id "
                          "WHERE r.status != 'finished'").fetchone()[0]
    recent = store.execute("SELECT COUNT(*), (julianday(MAX(created_at)) - julianday(MIN(created_at))) * 1440 "
                           "FROM attempts WHERE kind IN ('policy_call', 'policy_error') AND created_at >= "
                           "(SELECT datetime(MAX(created_at), '-30 minutes') FROM attempts)").fetchone()
    left = unfinished * 300 - spent  # 100 iterations x 3 answers a cell, unless it cracks sooner
    pace = recent[0] / recent[1] if recent[1] else 0.0
    print(f"{unfinished} of {planned} cells unfinished: at most {left} answers left; "
          f"{pace:.0f} answers a minute over the last half hour stored"
          + (f", so at most {left / pace / 60:.1f} hours at that pace" if pace else ""))
EOF
}

case "${1:-}" in
start)
    if pgrep -f "$PATTERN" >/dev/null; then echo "the pilot already runs (log: $LOG)"; exit 0; fi
    [ -x .venv/bin/evolve ] || bash scripts/install.sh
    [ -d programs/humaneval ] || .venv/bin/evolve import humaneval
    .venv/bin/python scripts/store_pack.py unpack "$PACKED" "$DB"  # only when it holds more than the local store
    echo "from: $(counts)"
    nohup .venv/bin/evolve experiment "$FOLDER/pilot.toml" --plain >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/pilot.sh save"
    ;;
status)
    echo "$(pgrep -f "$PATTERN" >/dev/null && echo running || echo 'not running'): $(counts "$FOLDER/pilot.toml")"
    ;;
save|pack)
    if [ "$1" = save ] && pgrep -f "$PATTERN" >/dev/null; then
        pkill -INT -of "$PATTERN"  # the oldest match: the command, not its sandboxed evaluators
        for _ in $(seq 1 120); do pgrep -f "$PATTERN" >/dev/null || break; sleep 1; done
        if pgrep -f "$PATTERN" >/dev/null; then echo "the pilot did not stop in 120 s; nothing packed" >&2; exit 1; fi
    fi
    # one consistent state even while the pilot writes; cells caught mid-run are resumed as after a kill
    .venv/bin/python scripts/store_pack.py pack "$DB" "$PACKED"
    echo "packed $PACKED ($(du -h "$PACKED" | cut -f1)): $(counts)"
    echo "commit it: git add $PACKED && git commit -m '...' -- $PACKED"
    ;;
*)
    echo "usage: bash scripts/pilot.sh start|status|save|pack" >&2
    exit 2
    ;;
esac
