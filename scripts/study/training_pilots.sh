#!/usr/bin/env bash
# Issue 62's training pilots (experiments/training/pilots/), one after another, each a whole piece:
#   bash scripts/study/training_pilots.sh start    # import the problems, run the planned pilots in the background
#   bash scripts/study/training_pilots.sh status   # each pilot: steps logged, running or not; the verdicts so far
#   bash scripts/study/training_pilots.sh save     # stop the running pilot (resumable on this machine only)
# then commit experiments/training/pilots/*/: each finished pilot's train_log.jsonl and train_config.json (its
# curves and settings). Optimizer states stay in checkpoints/pilots/ and are never committed; a pilot cut off by a
# session's end resumes from its last step on the same machine, or starts again on a fresh one
# (scripts/study/training_pilots.py says why).
set -euo pipefail
cd "$(dirname "$0")/../.."
FOLDER=experiments/training/pilots
LOG=${EVOLVE_PILOTS_LOG:-/tmp/evolve-training-pilots.log}
PATTERN="evolve train --config $FOLDER/"
RESUME_PATTERN="evolve train --resume checkpoints/pilots/"
PY=".venv/bin/python scripts/study/training_pilots.py"

running() { pgrep -f "$PATTERN" >/dev/null || pgrep -f "$RESUME_PATTERN" >/dev/null; }
keep() {  # a finished pilot's curves and settings, into the tree
    mkdir -p "$FOLDER/$1"
    cp "checkpoints/pilots/$1/train_log.jsonl" "checkpoints/pilots/$1/train_config.json" "$FOLDER/$1/"
}

case "${1:-}" in
start)
    if running || pgrep -f "training_pilots.sh run" >/dev/null; then echo "the pilots already run (log: $LOG)"; exit 0; fi
    [ -x .venv/bin/evolve ] || bash scripts/install.sh
    .venv/bin/evolve import generated --count 133 --difficulty 1 --seed 0 --force >/dev/null
    # the calibration's pool as it stands, grown pieces included (its train problems may lie past the first 400)
    .venv/bin/evolve import generated --count "$(.venv/bin/python scripts/study/generated_calibration.py count)" \
        --difficulty 2ee --seed 0 --force >/dev/null
    nohup nice -n 5 bash scripts/study/training_pilots.sh run >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/study/training_pilots.sh save"
    ;;
run)  # what `start` runs in the background
    tomls=$($PY order)  # a failure here stops the loop (set -e), rather than running no pilot
    for toml in $tomls; do
        name=$(basename "$toml" .toml)
        [ -f "$toml" ] || { echo "$toml: not planned (scripts/study/training_pilots.py plan)"; exit 1; }
        state=$($PY state "$name")
        rc=0
        case $state in
        finished) [ -f "$FOLDER/$name/train_log.jsonl" ] || keep "$name"; continue ;;
        resume) echo "== $(date -u +%FT%TZ) $name (resumed)"; .venv/bin/evolve train --resume "checkpoints/pilots/$name" || rc=$? ;;
        new) echo "== $(date -u +%FT%TZ) $name"; .venv/bin/evolve train --config "$toml" || rc=$? ;;
        *) echo "$name: no state ($state)"; exit 1 ;;
        esac
        if [ "$rc" != 0 ]; then echo "== $name stopped (exit $rc); it resumes on the next start"; exit "$rc"; fi
        keep "$name"
    done
    $PY judge
    ;;
status)
    echo "$(running && echo running || echo 'not running')"
    $PY judge
    ;;
save)
    pkill -f "training_pilots.sh run" || true
    for pattern in "$PATTERN" "$RESUME_PATTERN"; do
        if pgrep -f "$pattern" >/dev/null; then
            pkill -INT -of "$pattern"
            for _ in $(seq 1 300); do pgrep -f "$pattern" >/dev/null || break; sleep 1; done
        fi
    done
    if running; then echo "the pilot did not stop in 300 s" >&2; exit 1; fi
    echo "commit the finished pilots: git add $FOLDER && git commit"
    ;;
*)
    echo "usage: $0 start|status|save" >&2; exit 2 ;;
esac
