#!/usr/bin/env bash
# The vLLM integration check (too heavy for the test suite): short `evolve run`s through vLLM's CPU build,
# in process (backend vllm) and through `vllm serve` (backend openai, serve = true), with m = 1 and m = 3.
# Then the trainer's vLLM rollouts (tests/test_vllm_rollouts.py and 2 real steps of `evolve train --rollouts vllm`).
# Then, with --bench, tokens/s and mutations/min for both, one request alone vs 8 in flight.
#   bash scripts/install/install_vllm.sh && bash scripts/dev/check_vllm.sh [--bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv-vllm/bin/python
[ -x $PY ] || { echo "run scripts/install/install_vllm.sh first"; exit 2; }
OUT=${OUT:-/tmp/evolve-vllm-check}
ITERATIONS=${ITERATIONS:-4}
mkdir -p "$OUT"
rm -f "$OUT"/check.db*
export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
COMMON=(--plain --iterations "$ITERATIONS" --db "$OUT/check.db" --set run.concurrency=4 --set policy.max_model_len=2048)
for m in 1 3; do
  echo "== vllm in process, m=$m"
  $PY -m evolve.cli.main run "${COMMON[@]}" --set policy.backend='"vllm"' --set policy.name="\"vllm-m$m\"" \
    --set policy.answers=$m 2>&1 | grep -E "^starting|^ +(iterations|children|other|best scalar|generation)|error"
  echo "== openai against vllm serve (started by evolve), m=$m"
  $PY -m evolve.cli.main run "${COMMON[@]}" --set policy.backend='"openai"' --set policy.serve=true \
    --set policy.name="\"served-m$m\"" --set policy.answers=$m 2>&1 | grep -E "^starting|^ +(iterations|children|other|best scalar|generation)|error"
done
$PY - "$OUT/check.db" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(f"{'run':>4} {'policy':>10} {'status':>9} {'calls':>6} {'errors':>7} {'answers':>8} {'children':>9}")
for run_id, policy, status in db.execute("SELECT id, policy, status FROM runs ORDER BY id"):
    def count(where):
        return db.execute(f"SELECT COUNT(*) FROM attempts WHERE run_id=? AND iteration > 0 AND {where}",
                          (run_id,)).fetchone()[0]
    calls, errors = count("kind = 'policy_call'"), count("kind = 'policy_error'")
    answers, children = count("kind NOT IN ('policy_call', 'policy_error')"), count("kind = 'child'")
    print(f"{run_id:>4} {policy:>10} {status:>9} {calls:>6} {errors:>7} {answers:>8} {children:>9}")
    assert status == "finished" and calls > 0 and errors == 0, f"run {run_id}: {status}, {errors} policy errors"
PYEOF
echo "== evolve train --rollouts vllm: vLLM samples from the adapter being trained"
$PY -m pytest tests/test_vllm_rollouts.py -q -p no:cacheprovider 2>&1 | grep -E "passed|failed|error" | tail -1
$PY -m evolve.cli.main train --algo vpo --rollouts vllm --steps 2 --threads 2 --out "$OUT/train" --set vllm_dtype='"float32"' \
  2>&1 | grep -E "^(train|step|saved)|error"
if [ "${1:-}" = "--bench" ]; then
  for backend in vllm openai; do
    extra=(); [ $backend = openai ] && extra=(--set policy.serve=true)
    $PY scripts/bench/bench_backends.py --backends "$backend" --runs 0 "${extra[@]}" --set policy.max_model_len=2048 \
      --requests 8 2>&1 | grep -v -E "WARNING|^\(EngineCore"
  done
fi
