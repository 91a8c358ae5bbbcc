#!/usr/bin/env bash
# WER of NN LM rescoring on the dev N-best with tuned weights, for docs/benchmarks.md:
# first pass; LSTM without state carry; first-pass carry; rescored carry; LSTM+pointer+memory.
#
# Usage: tools/kaldi/wer_engine.sh LSTM_CKPT PTR_MEM_CKPT OUT_DIR
#
# Weights: rescore-tune sweeps weight x inv-acwt x wip by WER on the whole dev set (Kaldi's
# score.sh way) and, separately, tunes on one half of the conversations and reports the other
# (--split-half). With carry "rescored" the carried hypothesis depends on the weights, so those
# runs score with the setting tuned for the no-carry run of the same model, then re-tune.
# Environment: WEIGHTS (NN weight grid, 0:0.6:0.02), OOV_PENALTY (rescore-nbest --oov-penalty, 0),
# PYTHON, DEV_SET.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "Usage: $0 LSTM_CKPT PTR_MEM_CKPT OUT_DIR" >&2; exit 1
fi
lstm=$1; ptr=$2; out=$3
for f in "$lstm" "$ptr"; do [ -f "$f" ] || { echo "$0: no checkpoint $f" >&2; exit 1; }; done
here=$(cd "$(dirname "$0")/../.." && pwd)
D=${DEV_SET:-$here/../shared/data/tts-wikitext2-dev}   # the dev N-best benchmark
PY=${PYTHON:-python3}
grid=(--weights "${WEIGHTS:-0:0.6:0.02}" --wips=-1:3:0.5)  # NN weight x word insertion penalty
export PYTHONPATH=$here OMP_NUM_THREADS=1
mkdir -p "$out"

tune() {  # tune NAME [--nn-costs FILE]: whole-dev tuning and split-half tuning
  local name=$1; shift
  "$PY" -m rescore.cli.tune "$D/nbest" --data-dir "$D/data" "${grid[@]}" "$@" \
      --params-out "$out/$name.params.json" --report "$out/$name.tune.json" > "$out/$name.tune.txt"
  "$PY" -m rescore.cli.tune "$D/nbest" --data-dir "$D/data" "${grid[@]}" "$@" --split-half \
      --report "$out/$name.tune-half.json" > "$out/$name.tune-half.txt"
}
score() {  # score NAME CKPT CARRY [PARAMS]: lmwt.nn into $out/NAME, timed
  local name=$1 ckpt=$2 carry=$3 params=${4:-}
  local popt=(--weight 0.5 --inv-acwt 9.5)
  [ -n "$params" ] && popt=(--params "$params")
  /usr/bin/time -v -o "$out/$name.time" "$PY" -m rescore.cli.nbest "$D/nbest" "$out/$name" \
      --data-dir "$D/data" --model "$ckpt" --state-carry "$carry" --device cpu "${popt[@]}" \
      --oov-penalty "${OOV_PENALTY:-0}" > "$out/$name.log" 2>&1
}

tune first-pass
score lstm-none "$lstm" none;                 tune lstm-none --nn-costs "$out/lstm-none/lmwt.nn"
p=$out/lstm-none.params.json
score lstm-first "$lstm" first-pass "$p";     tune lstm-first --nn-costs "$out/lstm-first/lmwt.nn"
score lstm-rescored "$lstm" rescored "$p";    tune lstm-rescored --nn-costs "$out/lstm-rescored/lmwt.nn"
score ptr-none "$ptr" none;                   tune ptr-none --nn-costs "$out/ptr-none/lmwt.nn"
score ptr-rescored "$ptr" rescored "$out/ptr-none.params.json"
tune ptr-rescored --nn-costs "$out/ptr-rescored/lmwt.nn"

"$PY" - "$out" <<'EOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'run':14} {'dev WER (tuned on dev)':>22} {'held-out half WER':>18}  setting")
for name in ["first-pass", "lstm-none", "lstm-first", "lstm-rescored", "ptr-none", "ptr-rescored"]:
    t, h = json.loads((out / f"{name}.tune.json").read_text()), json.loads((out / f"{name}.tune-half.json").read_text())
    print(f"{name:14} {t['dev_wer']:22.2f} {h['held_out_wer']:18.2f}  {t['best']}")
EOF
