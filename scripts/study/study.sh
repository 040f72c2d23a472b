#!/usr/bin/env bash
# A study (issue 28: experiments/study_cpu.toml) in pieces, one machine after another, as scripts/study/pilot.sh runs the
# calibration pilot:
#   bash scripts/study/study.sh start [FILE]    # unpack what was committed, then `evolve study FILE` in the background
#   bash scripts/study/study.sh status [FILE]   # `evolve study FILE --status`: each stage, what is left and for how long
#   bash scripts/study/study.sh report-so-far [FILE]  # an interim STUDY/report/: the (piece, seed) parts every arm finished
#   bash scripts/study/study.sh save [FILE]     # Ctrl-C the study (it stops resumable), then pack
#   bash scripts/study/study.sh pack [FILE]     # pack while it goes on
#   bash scripts/study/study.sh save-after-step [FILE]  # wait (<= 20 min) for the training step under way to end, then save
# then commit: git add -A studies/NAME && git commit -m '...' -- studies/NAME
# Packing writes studies/NAME/study.db.xz (a consistent snapshot of the store; with [evolution] pieces, each piece's
# evolution_NN.db.xz too) and, for a training run stopped
# mid-way, its resume state as resume/state.pt.xz; .gitignore keeps out the live store, the step folders and each
# checkpoint's merged weights, which the study rebuilds from the committed adapter (evolve/rl/rebuild.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
FILE=${2:-experiments/study_cpu.toml}
LOG=${EVOLVE_STUDY_LOG:-/tmp/evolve-study.log}
PATTERN="evolve study $FILE\$"  # the study itself, not a --status or --report-so-far beside it

[ -x .venv/bin/evolve ] || bash scripts/install.sh
if grep -q "programs/humaneval/" "$FILE" && [ ! -d programs/humaneval ]; then .venv/bin/evolve import humaneval; fi
FOLDER=$(.venv/bin/python -c "import sys; from evolve.study.plan import StudyPaths, load_study; \
print(StudyPaths.of(load_study(sys.argv[1])).folder)" "$FILE")
DB=$FOLDER/study.db

# each training run stopped mid-way: its resume state, packed; a finished run's packed state is dropped
resume_states() {
    for out in "$FOLDER"/checkpoints/*/; do
        [ -d "$out" ] || continue
        state=${out}resume/state.pt
        if [ -f "${out}final/evolve_training.json" ]; then
            rm -f "$state.xz"
        elif [ -f "$state" ] && [ "$1" = pack ]; then
            xz -6 -T2 -c "$state" > "$state.xz.partial" && mv "$state.xz.partial" "$state.xz"
        elif [ ! -f "$state" ] && [ -f "$state.xz" ] && [ "$1" = unpack ]; then
            xz -dc "$state.xz" > "$state.partial" && mv "$state.partial" "$state"
        fi
    done
}

answers() { .venv/bin/python scripts/study/store_pack.py attempts "$1"; }
packed_answers() { local copy; copy=$(mktemp -d); xz -dc "$1" >"$copy/store.db"; answers "$copy/store.db"; rm -rf "$copy"; }

# the train log of the training run under way (a checkpoint folder without final/), empty when none
training_log() {
    for out in "$FOLDER"/checkpoints/*/; do
        [ -f "${out}train_log.jsonl" ] && [ ! -d "${out}final" ] && echo "${out}train_log.jsonl"
    done | head -1
}

case "${1:-}" in
save-after-step)  # a plain save mid-step loses that step's minutes: wait for its line in the train log first
    log=$(training_log)
    if [ -n "$log" ] && pgrep -f "$PATTERN" >/dev/null; then
        steps=$(wc -l < "$log")
        echo "waiting for step $((steps + 1)) of $(basename "$(dirname "$log")") to end (at most 20 min)"
        for _ in $(seq 1 1200); do [ "$(wc -l < "$log")" -gt "$steps" ] && break; sleep 1; done
    fi
    exec bash scripts/study/study.sh save "$FILE"
    ;;
start)
    if pgrep -f "$PATTERN" >/dev/null; then echo "the study already runs (log: $LOG)"; exit 0; fi
    for packed in "$DB.xz" "$FOLDER"/evolution_*.db.xz; do  # the study's store and each evolution piece's
        if [ -f "$packed" ]; then .venv/bin/python scripts/study/store_pack.py unpack "$packed" "${packed%.xz}"; fi
    done
    resume_states unpack
    nohup .venv/bin/evolve study "$FILE" >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/study/study.sh save $FILE"
    ;;
status)
    .venv/bin/evolve study "$FILE" --status
    ;;
report-so-far)  # an interim report from the (piece, seed) parts every arm has finished, beside the running study
    nice .venv/bin/evolve study "$FILE" --report-so-far
    ;;
save|pack)
    if [ "$1" = save ] && pgrep -f "$PATTERN" >/dev/null; then
        pkill -INT -of "$PATTERN"
        for _ in $(seq 1 300); do pgrep -f "$PATTERN" >/dev/null || break; sleep 1; done
        if pgrep -f "$PATTERN" >/dev/null; then echo "the study did not stop in 300 s; nothing packed" >&2; exit 1; fi
    fi
    if [ -f "$DB" ]; then .venv/bin/python scripts/study/store_pack.py pack "$DB" "$DB.xz"; fi
    for piece in "$FOLDER"/evolution_*.db; do  # [evolution] pieces: a piece packed with all its answers is left as is
        [ -f "$piece" ] || continue
        if [ ! -f "$piece.xz" ] || [ "$(answers "$piece")" != "$(packed_answers "$piece.xz")" ]; then
            .venv/bin/python scripts/study/store_pack.py pack "$piece" "$piece.xz"
        fi
    done
    resume_states pack
    git add -A "$FOLDER" 2>/dev/null || true
    echo "packed $FOLDER; to commit ($(git diff --cached --stat -- "$FOLDER" | tail -1)):"
    echo "  git commit -m '...' -- $FOLDER"
    ;;
*)
    echo "usage: bash scripts/study/study.sh start|status|report-so-far|save|save-after-step|pack [STUDY.toml]" >&2
    exit 2
    ;;
esac
