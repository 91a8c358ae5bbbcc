#!/usr/bin/env bash
# The engine benchmark on a GPU, as one prepared script (meant to finish inside the
# device tool's 10-minute limit; not yet run on a GPU): the card's measured fp32/bf16 GEMM rate
# (the roofline), then the fast and padded
# engines on the whole tts-wikitext2-dev N-best set with a random LSTM and Transformer
# (2x256, V = 10000: the LM helper's size), each Transformer schedule, and the naive reference
# on a small subset for the costs. Everything lands in OUT_DIR: bench.log and 7 JSON files
# (the device tool returns 8 files at most).
#
#   bash tools/bench/bench_gpu.sh prepare            # here, once: data + wheels into .gpu/ (ignored)
#   bash tools/bench/bench_gpu.sh run OUT_DIR        # there, from the repository root
#
# With the device tool: carry [".gpu"], command
#   bash tools/bench/bench_gpu.sh run $OUT
# Environment: DEVICE (cuda), DATA (.gpu/data, else ../shared/data), CONVS/UTTS (all), REPEAT (3),
# SQUARE (8192: side of the square GEMM). A CPU smoke run:
#   DEVICE=cpu CONVS=1 UTTS=1 REPEAT=1 SQUARE=512 bash tools/bench/bench_gpu.sh run /tmp/gpu-smoke
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"

usage() {
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
  exit 1
}

prepare() {
  local src=${DATA:-../shared/data}
  [ -d "$src/tts-wikitext2-dev/nbest" ] || { echo "error: $src/tts-wikitext2-dev/nbest: no such directory (set DATA)" >&2; exit 1; }
  rm -rf .gpu.tmp && mkdir -p .gpu.tmp/data/tts-wikitext2-dev .gpu.tmp/data/wikitext2-asr .gpu.tmp/whl
  cp -r "$src/tts-wikitext2-dev/nbest" "$src/tts-wikitext2-dev/data" .gpu.tmp/data/tts-wikitext2-dev/
  cp "$src/wikitext2-asr/train.txt" .gpu.tmp/data/wikitext2-asr/
  # packages the GPU image lacks (it has torch, numpy, click, tqdm, matplotlib)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu.tmp/whl kaldiio==2.18.1 jiwer==4.0.0 rapidfuzz==3.14.6
  rm -rf .gpu && mv .gpu.tmp .gpu
  du -sh .gpu
}

run() {
  local out=${1:?usage: bench_gpu.sh run OUT_DIR}
  local device=${DEVICE:-cuda} repeat=${REPEAT:-3} convs=${CONVS:-1000} utts=${UTTS:-1000}
  local data=${DATA:-}
  if [ -z "$data" ]; then
    if [ -d .gpu/data ]; then data=.gpu/data; else data=../shared/data; fi
  fi
  mkdir -p "$out"
  if ls .gpu/whl/*.whl >/dev/null 2>&1 && ! python3 -c "import kaldiio, jiwer, rapidfuzz" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .gpu/whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
  local set=(--nbest-dir "$data/tts-wikitext2-dev/nbest" --data-dir "$data/tts-wikitext2-dev/data"
             --vocab-text "$data/wikitext2-asr/train.txt" --device "$device")
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  } | tee -a "$out/bench.log"
  python -m tools.bench.bench_gemm --device "$device" --dtypes fp32,bf16 --square "${SQUARE:-8192}" --rows 4096 \
    --json "$out/gemm.json" 2>&1 | tee -a "$out/bench.log"
  # costs: fast and padded against the naive reference, on a subset the naive scorer finishes
  for arch in lstm transformer; do
    python -m tools.bench.bench_engine "${set[@]}" --arch "$arch" --convs 4 --utts 2 --repeat 1 \
      --json "$out/costs-$arch.json" 2>&1 | tee -a "$out/bench.log"
  done
  # speed on the whole set (max-tokens: bigger calls suit a GPU; still OOM-safe by back-off)
  for arch in lstm transformer; do
    python -m tools.bench.bench_engine "${set[@]}" --arch "$arch" --convs "$convs" --utts "$utts" \
      --engines fast,padded --repeat "$repeat" --max-tokens 8192 \
      --json "$out/engine-$arch.json" 2>&1 | tee -a "$out/bench.log"
  done
  for schedule in tree levels; do
    python -m tools.bench.bench_engine "${set[@]}" --arch transformer --convs "$convs" --utts "$utts" \
      --engines fast --schedule "$schedule" --repeat "$repeat" --max-tokens 8192 \
      --json "$out/engine-transformer-$schedule.json" 2>&1 | tee -a "$out/bench.log"
  done
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
