#!/usr/bin/env bash
# Dev WER of one model scored with exact and with unnormalised costs: rescore-nbest
# --normalize exact and --normalize none on the dev N-best (carry rescored, the same scoring
# setting), each tuned on the whole dev set and, honestly, on one half (--split-half).
#
# Usage: tools/kaldi/wer_normalize.sh CKPT OUT_DIR
# Environment: WEIGHTS (NN weight grid, 0:1:0.05), OOV_PENALTY (9.92 = ln of the 20,379 training
# word types outside a 10k vocabulary of wikitext2-asr/train.txt), SETTING (rescore-nbest options
# the carried best hypothesis is picked with: --weight 0.5 --inv-acwt 9.5), PYTHON, DEV_SET.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "Usage: $0 CKPT OUT_DIR" >&2; exit 1
fi
ckpt=$1; out=$2
[ -f "$ckpt" ] || { echo "$0: no checkpoint $ckpt" >&2; exit 1; }
here=$(cd "$(dirname "$0")/../.." && pwd)
D=${DEV_SET:-$here/../shared/data/tts-wikitext2-dev}
PY=${PYTHON:-python3}
grid=(--weights "${WEIGHTS:-0:1:0.05}" --wips=-1:3:0.5)
read -r -a setting <<< "${SETTING:---weight 0.5 --inv-acwt 9.5}"
export PYTHONPATH=$here OMP_NUM_THREADS=1
mkdir -p "$out"
for norm in exact none; do
  /usr/bin/time -v -o "$out/$norm.time" "$PY" -m rescore.cli.nbest "$D/nbest" "$out/$norm" \
      --data-dir "$D/data" --model "$ckpt" --state-carry rescored --device cpu "${setting[@]}" \
      --oov-penalty "${OOV_PENALTY:-9.92}" --normalize "$norm" > "$out/$norm.log" 2>&1
  "$PY" -m rescore.cli.tune "$D/nbest" --data-dir "$D/data" "${grid[@]}" \
      --nn-costs "$out/$norm/lmwt.nn" --report "$out/$norm.tune.json" > "$out/$norm.tune.txt"
  "$PY" -m rescore.cli.tune "$D/nbest" --data-dir "$D/data" "${grid[@]}" --split-half \
      --nn-costs "$out/$norm/lmwt.nn" --report "$out/$norm.tune-half.json" > "$out/$norm.tune-half.txt"
done
"$PY" - "$out" <<'PYEOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'costs':8} {'dev WER (tuned on dev)':>22} {'held-out half WER':>18}  setting")
for name in ["exact", "none"]:
    t = json.loads((out / f"{name}.tune.json").read_text())
    h = json.loads((out / f"{name}.tune-half.json").read_text())
    print(f"{name:8} {t['dev_wer']:22.2f} {h['held_out_wer']:18.2f}  {t['best']}")
PYEOF
