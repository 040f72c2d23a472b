#!/usr/bin/env bash
# The calibration pilot (issue 28, experiments/calibration/) in pieces, one machine after another:
#   bash scripts/study/pilot.sh start    # unpack the committed store if it holds more, import HumanEval, run in the background
#   bash scripts/study/pilot.sh status   # answers so far, cells finished, whether it runs
#   bash scripts/study/pilot.sh save     # Ctrl-C the pilot (it stops resumable), pack its store into pilot.db.xz
#   bash scripts/study/pilot.sh pack     # pack a consistent snapshot of the store while the pilot goes on
# then commit experiments/calibration/pilot.db.xz. `start` again on any machine carries on where `save` left off.
# When the pilot's last cell finishes, the same background job applies the selection rule
# (scripts/study/calibration_select.py --pilot: the lists, selection.tsv and experiments/study_cpu.toml), simulates the
# power of the sizes as selected (power_selected.txt, scripts/study/study_power.py --selection) and starts the
# study (`bash scripts/study/study.sh start`), so no machine time is lost between the stages; from then on
# `bash scripts/study/study.sh status|save` applies, and the lists and study file are committed with the next piece.
set -euo pipefail
cd "$(dirname "$0")/../.."
FOLDER=experiments/calibration
DB=$FOLDER/pilot.db
PACKED=$DB.xz
LOG=${EVOLVE_PILOT_LOG:-/tmp/evolve-pilot.log}
PATTERN="evolve experiment $FOLDER/pilot.toml"

counts() {
    .venv/bin/python scripts/study/pilot_status.py "$DB" "$@"
}

case "${1:-}" in
start)
    if pgrep -f "$PATTERN" >/dev/null; then echo "the pilot already runs (log: $LOG)"; exit 0; fi
    [ -x .venv/bin/evolve ] || bash scripts/install.sh
    [ -d programs/humaneval ] || .venv/bin/evolve import humaneval
    .venv/bin/python scripts/study/store_pack.py unpack "$PACKED" "$DB"  # only when it holds more than the local store
    echo "from: $(counts)"
    nohup bash scripts/study/pilot.sh run >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/study/pilot.sh save"
    ;;
run)  # what `start` runs in the background: the pilot, then (only if every cell finished) selection and study
    .venv/bin/evolve experiment "$FOLDER/pilot.toml" --plain
    [ -f "$FOLDER/base_n20.db" ] || xz -dk "$FOLDER/base_n20.db.xz"  # the screen's store, which the rule reads too
    .venv/bin/python scripts/study/calibration_select.py --pilot "$DB"
    # the power of the sizes as selected (base rates per side of the band), before any training step
    .venv/bin/python scripts/study/study_power.py --selection "$FOLDER/selection.tsv" --studies 200 \
        | tee "$FOLDER/power_selected.txt"
    bash scripts/study/study.sh start
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
    .venv/bin/python scripts/study/store_pack.py pack "$DB" "$PACKED"
    echo "packed $PACKED ($(du -h "$PACKED" | cut -f1)): $(counts)"
    echo "commit it: git add $PACKED && git commit -m '...' -- $PACKED"
    ;;
*)
    echo "usage: bash scripts/study/pilot.sh start|status|save|pack" >&2
    exit 2
    ;;
esac
