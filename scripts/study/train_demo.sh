#!/usr/bin/env bash
# A few real `evolve train` steps of VPO, GRPO and Multi-RLVR on fizzbuzz with SmolLM2-135M on CPU, then steps/min.
#
#   bash scripts/study/train_demo.sh                      # 3 steps each, G=4, 128-token cap, all cores
#   STEPS=5 G=4 TOKENS=192 THREADS=1 LR=1e-4 ALGOS="vpo grpo" bash scripts/study/train_demo.sh
#   VENV=.venv-vllm ROLLOUTS=vllm DEVICE=cuda bash scripts/study/train_demo.sh   # a GPU machine with vLLM in VENV
#
# steps/min counts each step's own time (rollouts + gradient step, from OUT/ALGO/train_log.jsonl); the wall time
# also holds the model load and the final checkpoint save. On a shared machine use THREADS=1: torch's threads
# spin-wait when other jobs hold the cores and two threads can be ten times slower than one.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-3} G=${G:-4} TOKENS=${TOKENS:-128} THREADS=${THREADS:-0} SEED=${SEED:-0} LR=${LR:-1e-5}
VENV=${VENV:-.venv} ROLLOUTS=${ROLLOUTS:-auto} DEVICE=${DEVICE:-auto}
OUT=${OUT:-$(mktemp -d /tmp/evolve-train-demo.XXXXXX)}
ALGOS=${ALGOS:-"vpo grpo multi-rlvr"}
for algo in $ALGOS; do
  start=$(date +%s)
  "$VENV/bin/python" -m evolve.cli.main train --algo "$algo" --problems fizzbuzz --steps "$STEPS" --group-size "$G" \
    --max-new-tokens "$TOKENS" --threads "$THREADS" --seed "$SEED" --lr "$LR" --out "$OUT/$algo" \
    --rollouts "$ROLLOUTS" --device "$DEVICE"
  echo "$(( $(date +%s) - start ))" > "$OUT/$algo/wall_s"
done
"$VENV/bin/python" - "$OUT" $ALGOS <<'PY'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print(f"\n{'algo':<11} {'steps':>5} {'steps/min':>9} {'s/step':>7} {'gen s':>6} {'train s':>7} {'tokens':>6} "
      f"{'reward first->last':>18} {'wall s':>6}")
for algo in sys.argv[2:]:
    log = [json.loads(line) for line in (out / algo / "train_log.jsonl").read_text().splitlines()]
    seconds = sum(r["seconds"] for r in log)
    mean = lambda key: sum(r[key] for r in log) / len(log)  # noqa: E731
    rewards = f"{log[0]['reward']:.3f} -> {log[-1]['reward']:.3f}"
    print(f"{algo:<11} {len(log):>5} {60 * len(log) / seconds:>9.2f} {seconds / len(log):>7.1f} {mean('gen_s'):>6.1f} "
          f"{mean('train_s'):>7.1f} {mean('tokens'):>6.0f} {rewards:>18} {(out / algo / 'wall_s').read_text().strip():>6}")
print(f"logs and checkpoints: {out}/ALGO/")
PY
