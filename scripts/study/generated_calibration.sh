#!/usr/bin/env bash
# Issue 60's calibration of the generated pool (experiments/generated/calibration/) in pieces, one machine after another:
#   bash scripts/study/generated_calibration.sh start    # unpack the committed stores, import the pool, run in the background
#   bash scripts/study/generated_calibration.sh status   # per piece: answers, cells finished; whether it runs; forecast
#   bash scripts/study/generated_calibration.sh save     # Ctrl-C the running pieces (resumable), pack every store
# then commit experiments/generated/calibration/ (the packed stores piece_*.db.xz, and after a growth growth.txt,
# growth_checks.txt, pool.txt and the new pieces). `start` on any machine carries on where `save` left
# off: the pieces run in order (difficulty 1 and 2ee alternating, grown pieces last: `generated_calibration.py
# order`), a finished piece is skipped (`next`: every problem's two cells ended), the pool grows as the README's rule
# says (`grow`, after each piece), and no piece starts once $EVOLVE_CALIBRATION_IN_BAND (default 200: README's
# changes) problems are in band. $EVOLVE_CALIBRATION_WORKERS pieces run at once (default: the cores, each piece's
# engine on one thread: two one-thread engines made 1.15-1.35x the tokens a second of one two-thread engine,
# scripts/bench/bench_engine_per_core.py, docs/cpu_inference.md); a piece is claimed by a lock, so no two run it.
set -euo pipefail
cd "$(dirname "$0")/../.."
FOLDER=experiments/generated/calibration
LOG=${EVOLVE_CALIBRATION_LOG:-/tmp/evolve-generated-calibration.log}  # worker W logs to LOG with -W before .log
PATTERN="evolve experiment $FOLDER/piece_"
TARGET=${EVOLVE_CALIBRATION_IN_BAND:-200}  # problems in band at which no further piece starts (README: the stop)
WORKERS=${EVOLVE_CALIBRATION_WORKERS:-$(nproc)}
THREADS=${EVOLVE_THREADS:-}  # each piece's engine: unset, one worker's engine chooses as it runs; else cores/workers
if [ -z "$THREADS" ] && [ "$WORKERS" -gt 1 ]; then THREADS=$(( $(nproc) / WORKERS > 1 ? $(nproc) / WORKERS : 1 )); fi
LOCKS=${EVOLVE_CALIBRATION_LOCKS:-/tmp/evolve-generated-calibration-locks}  # a piece's lock, held while it runs
PY=".venv/bin/python scripts/study/generated_calibration.py"

pieces() { ls "$FOLDER"/piece_*.toml | sort; }
answers() { .venv/bin/python scripts/study/store_pack.py attempts "$1"; }
packed_answers() { local copy; copy=$(mktemp); xz -dc "$1" >"$copy"; answers "$copy"; rm -f "$copy"; }

case "${1:-}" in
start)
    mkdir -p "$LOCKS" && [ -w "$LOCKS" ] || { echo "cannot write the lock folder $LOCKS" >&2; exit 1; }
    # held until the workers are started (a `save` meanwhile waits for them); a start or save under way: none
    exec 8>"$LOCKS/start.lock"
    flock -n 8 || { echo "a start or a save of the calibration is under way; try again once it has ended"; exit 0; }
    if pgrep -f "$PATTERN" >/dev/null || pgrep -f "generated_calibration.sh run" >/dev/null; then
        echo "the calibration already runs (logs: ${LOG%.log}-N.log)"; exit 0
    fi
    [ -x .venv/bin/evolve ] || bash scripts/install.sh
    .venv/bin/python scripts/study/generated_calibration.py plan >/dev/null  # the pieces, grown ones too (same bytes)
    .venv/bin/evolve import generated --count 133 --difficulty 1 --seed 0 --force >/dev/null
    .venv/bin/evolve import generated --count "$(.venv/bin/python scripts/study/generated_calibration.py count)" \
        --difficulty 2ee --seed 0 --force >/dev/null  # 400, and more once the pool has grown
    for toml in $(pieces); do  # a packed store replaces the local one only when it holds more answers
        db=${toml%.toml}.db
        [ -f "$db.xz" ] && .venv/bin/python scripts/study/store_pack.py unpack "$db.xz" "$db" >/dev/null
    done
    # a growth check missed by a stop between a piece's end and its check (README's rule), then its problems
    $PY grow --target "$TARGET" || echo "== the growth check failed; going on"
    .venv/bin/evolve import generated --count "$($PY count)" --difficulty 2ee --seed 0 --force >/dev/null
    rm -f "$LOCKS"/*.ended "$LOCKS/stop"  # what an earlier session's workers ran and its save
    for worker in $(seq 1 "$WORKERS"); do
        EVOLVE_THREADS=$THREADS nohup nice -n 5 bash scripts/study/generated_calibration.sh run \
            >>"${LOG%.log}-$worker.log" 2>&1 8>&- &  # the start lock is not theirs
        sleep 2  # politeness only: the piece's lock is what keeps two workers off one piece
    done
    echo "started $WORKERS worker(s), logs: ${LOG%.log}-N.log; stop with: bash scripts/study/generated_calibration.sh save"
    ;;
run)  # what `start` runs in the background, once per worker: the next piece no worker holds and none ran this
    # session, to its end, packed, then the next, until 200 are in band (then only begun pieces are finished)
    mkdir -p "$LOCKS"
    while [ ! -e "$LOCKS/stop" ]; do
        ended=$(for marker in "$LOCKS"/*.ended; do
            if [ -e "$marker" ]; then echo "$FOLDER/$(basename "$marker" .ended)"; fi
        done)
        # `next` under the growth lock shared: a growth's pieces are named only once its problems are imported
        rc=0; toml=$(flock -s "$LOCKS/grow.lock" $PY next --target "$TARGET" --skip "$ended ${claimed:-}") || rc=$?
        if [ "$rc" = 3 ]; then
            # nothing to start now; while another worker's piece runs, its growth may add pieces: ask again
            if pgrep -f "$PATTERN" >/dev/null; then claimed=""; sleep 60; continue; fi
            break
        fi
        if [ "$rc" != 0 ]; then echo "== choosing the next piece failed (exit $rc); see above"; exit "$rc"; fi
        name=$(basename "$toml")
        db=${toml%.toml}.db
        # the piece's lock, held while it runs and is packed; claimed by another worker (75): skip it for now; a
        # piece that ended this session (any worker) is not run again until the next start
        rc=0
        (
            flock -n -E 75 9 || exit $?
            if [ -e "$LOCKS/$name.ended" ] || [ -e "$LOCKS/stop" ]; then exit 75; fi
            echo "== $(date -u +%FT%TZ) $toml"
            piece=0; .venv/bin/evolve experiment "$toml" --plain || piece=$?
            if [ "$piece" = 130 ]; then echo "interrupted: $toml resumes on the next start"; exit 130; fi
            touch "$LOCKS/$name.ended"
            [ -f "$db" ] && .venv/bin/python scripts/study/store_pack.py pack "$db" "$db.xz"
            exit "$piece"
        ) 9>"$LOCKS/$name.lock" || rc=$?
        if [ "$rc" = 75 ]; then claimed="${claimed:-} $toml"; continue; fi
        if [ "$rc" = 130 ]; then exit 130; fi
        [ "$rc" = 0 ] || echo "== $toml ended with cells not finished (exit $rc); see above; going on"
        claimed=""
        # the registered growth rule (README): after each finished 2ee piece from the third, more pieces if short;
        # every piece due is checked (pieces end out of order when several run); a growth's problems are imported
        # before its pieces can be named (unchanged files are left alone: a piece beside it reads the same bytes)
        (
            flock 9
            $PY grow --target "$TARGET" || echo "== the growth check failed; going on"
            .venv/bin/evolve import generated --count "$($PY count)" --difficulty 2ee --seed 0 --force >/dev/null
        ) 9>"$LOCKS/grow.lock"
    done
    # the lists once no piece runs (the last worker to end writes them; two ending together write the same bytes)
    if [ ! -e "$LOCKS/stop" ] && ! pgrep -f "$PATTERN" >/dev/null; then $PY select --target "$TARGET"; fi
    ;;
status)
    if pgrep -f "$PATTERN" >/dev/null; then echo "running: $(pgrep -fc "$PATTERN") piece(s)"
    elif pgrep -f "generated_calibration.sh run" >/dev/null; then echo "workers waiting (a growth check or import)"
    else echo "not running"; fi
    for toml in $(pieces); do
        db=${toml%.toml}.db
        if [ -f "$db" ]; then
            echo "$(basename "$toml"): $(.venv/bin/python scripts/study/pilot_status.py "$db" "$toml")"
        fi
    done
    .venv/bin/python scripts/study/generated_calibration.py enough --target "$TARGET" || true
    .venv/bin/python scripts/study/generated_calibration.py forecast --target "$TARGET"
    ;;
save|pack)
    if [ "$1" = save ]; then
        mkdir -p "$LOCKS"
        exec 8>"$LOCKS/start.lock"  # held to the end: a start under way launches its workers first, none begins
        flock -n 8 || { echo "waiting for the start under way to launch its workers"; flock 8; }
        touch "$LOCKS/stop"  # no worker starts a piece from now on
        pkill -f "generated_calibration.sh run" || true  # the loops first, so no next piece starts
        flock "$LOCKS/grow.lock" true  # a growth check under way ends (its pieces and record written together)
        for _ in $(seq 1 120); do pgrep -f "store_pack.py pack" >/dev/null || break; sleep 1; done  # its pack ends
        if pgrep -f "$PATTERN" >/dev/null; then
            # each piece's command, not a process it started (an evaluator between its fork and exec carries the
            # command line)
            for pid in $(pgrep -f "$PATTERN"); do
                parent=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') || continue
                tr '\0' ' ' <"/proc/$parent/cmdline" 2>/dev/null | grep -q "$PATTERN" || kill -INT "$pid" 2>/dev/null || true
            done
            for _ in $(seq 1 120); do pgrep -f "$PATTERN" >/dev/null || break; sleep 1; done
            if pgrep -f "$PATTERN" >/dev/null; then echo "a piece did not stop in 120 s; nothing packed" >&2; exit 1; fi
        fi
    fi
    for toml in $(pieces); do
        db=${toml%.toml}.db
        [ -f "$db" ] || continue
        # a piece whose packed store already holds all its answers is left as committed
        if [ ! -f "$db.xz" ] || [ "$(answers "$db")" != "$(packed_answers "$db.xz")" ]; then
            .venv/bin/python scripts/study/store_pack.py pack "$db" "$db.xz"
            echo "packed $db.xz ($(du -h "$db.xz" | cut -f1))"
        fi
    done
    echo "commit them (and any growth: growth.txt, growth_checks.txt, pool.txt, new pieces): git add $FOLDER && git commit"
    ;;
*)
    echo "usage: bash scripts/study/generated_calibration.sh start|status|save|pack" >&2
    exit 2
    ;;
esac
