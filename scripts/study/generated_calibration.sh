#!/usr/bin/env bash
# Issue 60's calibration of the generated pool (experiments/generated/calibration/) in pieces, one machine after another:
#   bash scripts/study/generated_calibration.sh start    # unpack the committed stores, import the pool, run in the background
#   bash scripts/study/generated_calibration.sh status   # per piece: answers, cells finished; whether it runs; forecast
#   bash scripts/study/generated_calibration.sh save     # Ctrl-C the running piece (resumable), pack every store
# then commit experiments/generated/calibration/ (the packed stores piece_*.db.xz, and after a growth growth.txt,
# growth_checks.txt, pool.txt and the new pieces). `start` on any machine carries on where `save` left
# off: the pieces run in order (difficulty 1 and 2ee alternating, grown pieces last: `generated_calibration.py
# order`), a finished piece is skipped (`next`: every problem's two cells ended), the pool grows as the README's rule
# says (`grow`, after each piece), and no piece starts once $EVOLVE_CALIBRATION_IN_BAND (default 200: README's
# changes) problems are in band.
set -euo pipefail
cd "$(dirname "$0")/../.."
FOLDER=experiments/generated/calibration
LOG=${EVOLVE_CALIBRATION_LOG:-/tmp/evolve-generated-calibration.log}
PATTERN="evolve experiment $FOLDER/piece_"
TARGET=${EVOLVE_CALIBRATION_IN_BAND:-200}  # problems in band at which no further piece starts (README: the stop)

pieces() { ls "$FOLDER"/piece_*.toml | sort; }
answers() { .venv/bin/python scripts/study/store_pack.py attempts "$1"; }
packed_answers() { local copy; copy=$(mktemp); xz -dc "$1" >"$copy"; answers "$copy"; rm -f "$copy"; }

case "${1:-}" in
start)
    if pgrep -f "$PATTERN" >/dev/null || pgrep -f "generated_calibration.sh run" >/dev/null; then
        echo "the calibration already runs (log: $LOG)"; exit 0
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
    nohup nice -n 5 bash scripts/study/generated_calibration.sh run >>"$LOG" 2>&1 &
    echo "started (pid $!), log: $LOG; stop it with: bash scripts/study/generated_calibration.sh save"
    ;;
run)  # what `start` runs in the background: each piece to its end, packed, then the next, until 200 are in band
    PY=".venv/bin/python scripts/study/generated_calibration.py"
    # a growth check missed by a stop between a piece's end and its check (README's rule), then its problems
    $PY grow --target "$TARGET" || echo "== the growth check failed; going on"
    .venv/bin/evolve import generated --count "$($PY count)" --difficulty 2ee --seed 0 --force >/dev/null
    tried=" "  # pieces run by this loop: one whose cell failed is retried by the next start, not again now
    while true; do
        rc=0; toml=$($PY next --target "$TARGET" --skip "$tried") || rc=$?
        if [ "$rc" = 3 ]; then break; fi  # none left to start, or enough in band
        if [ "$rc" != 0 ]; then echo "== choosing the next piece failed (exit $rc); see above"; exit "$rc"; fi
        tried="$tried$toml "
        db=${toml%.toml}.db
        echo "== $(date -u +%FT%TZ) $toml"
        .venv/bin/evolve experiment "$toml" --plain || rc=$?
        if [ "$rc" = 130 ]; then echo "interrupted: $toml resumes on the next start"; exit 130; fi
        [ -f "$db" ] && .venv/bin/python scripts/study/store_pack.py pack "$db" "$db.xz"
        [ "$rc" = 0 ] || echo "== $toml ended with cells not finished (exit $rc); see above; going on"
        # the registered growth rule (README): after a finished 2ee piece from the third, more pieces if short;
        # a growth's problems are imported before its pieces run
        $PY grow --after "$toml" --target "$TARGET" || echo "== the growth check after $toml failed; going on"
        .venv/bin/evolve import generated --count "$($PY count)" --difficulty 2ee --seed 0 --force >/dev/null
    done
    $PY select --target "$TARGET"
    ;;
status)
    echo "$(pgrep -f "$PATTERN" >/dev/null && echo running || echo 'not running')"
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
        pkill -f "generated_calibration.sh run" || true  # the loop first, so no next piece starts
        for _ in $(seq 1 120); do pgrep -f "store_pack.py pack" >/dev/null || break; sleep 1; done  # its pack ends
        if pgrep -f "$PATTERN" >/dev/null; then
            pkill -INT -of "$PATTERN"  # the oldest match: the command, not its sandboxed evaluators
            for _ in $(seq 1 120); do pgrep -f "$PATTERN" >/dev/null || break; sleep 1; done
            if pgrep -f "$PATTERN" >/dev/null; then echo "the piece did not stop in 120 s; nothing packed" >&2; exit 1; fi
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
