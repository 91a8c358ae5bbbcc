#!/usr/bin/env bash
# The ablation of LMs trained at one CPU budget (docs/benchmarks.md): train 2x256 LMs at
# one CPU budget, score the dev N-best set with each (no carry, rescored carry, neural cache),
# then the two-fold cross-validated ablation with bootstrap CIs (tools/experiments/ablation.py).
#
# Usage: tools/experiments/ablation_cpu_budget.sh OUT_DIR
# Environment:
#   SET     10k:   four models (LSTM, Transformer, each with softmax or pointer + memory), 10k-word
#                  softmax, dropout 0.1, epochs of 200 batches (the first table of the section);
#           class: two LSTMs (softmax head, pointer + memory) with every training word and the
#                  class-factored output layer (174 classes), dropout 0.2, epochs of 500 batches
#                  (the second table); default 10k
#   BUDGET  CPU-minutes per model, stopped at the epoch end past it (15; the second table also
#           has 80)
#   JOBS    processes at a time (2); DATA the shared data dir (../shared/data)
# One thread per process; run from the repository root with the package installed. A run that
# was stopped resumes: finished trainings and scorings are kept.
set -euo pipefail
[ $# -eq 1 ] || { echo "Usage: $0 OUT_DIR" >&2; exit 1; }
out=$1; budget=${BUDGET:-15}; jobs=${JOBS:-2}; set_=${SET:-10k}
data=${DATA:-../shared/data}
D=$data/wikitext2-asr; DEV=$data/tts-wikitext2-dev
export OMP_NUM_THREADS=1
mkdir -p "$out/score"

common=(--train "$D/train.txt" --valid "$D/valid.nodev.txt" --hidden 256 --layers 2 --bptt 100
        --batch-size 20 --threads 1 --seed 1 --max-minutes "$budget")
case $set_ in
  10k) common+=(--max-vocab 10000 --dropout 0.1 --epochs 100 --epoch-batches 200) ;;
  class) common+=(--output class --classes 174 --dropout 0.2 --epochs 200 --epoch-batches 500
                  --max-anneals 4) ;;
  *) echo "$0: SET is 10k or class, not $set_" >&2; exit 1 ;;
esac
tfm=(--arch transformer --n-heads 4 --positions learned --optimizer adam --lr 1e-3 --warmup 50 --clip 1.0)
train() {  # train NAME OPTIONS...: resumes an interrupted run
  local name=$1; shift
  local resume=()
  [ -f "$out/$name/train.json" ] && grep -q '"status": "done"' "$out/$name/train.json" && return 0
  [ -f "$out/$name/last.pt" ] && resume=(--resume)
  rescore-train-lm "${common[@]}" "$@" --out-dir "$out/$name" "${resume[@]}" > "$out/$name.log" 2>&1
}
score() {  # score NAME MODEL CARRY [cache]
  local name=$1 model=$2 carry=$3 cache=${4:-}
  local extra=()
  [ -n "$cache" ] && extra=(--cache-window 1000 --cache-theta 0.6 --cache-lambda 0.3)
  [ -f "$out/score/$name/lmwt.nn" ] && return 0
  rescore-nbest "$DEV/nbest" "$out/score/$name" --data-dir "$DEV/data" --model "$out/$model/model.pt" \
    --state-carry "$carry" --device cpu --weight 0.5 --inv-acwt 9.5 --wip 0.5 --oov-penalty auto \
    --train-text "$D/train.txt" "${extra[@]}" > "$out/score/$name.log" 2>&1
}
wait_jobs() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done; }

S=$out/score
sys=(--system first-pass=first-pass)
pairs=()
if [ "$set_" = 10k ]; then
  echo "$0: training 4 models, $budget CPU-minutes each, $jobs at a time (logs in $out)"
  train lstm --arch lstm --head softmax & wait_jobs
  train lstm-ptrmem --arch lstm --head pointer --memory-aug & wait_jobs
  train tfm "${tfm[@]}" --head softmax & wait_jobs
  train tfm-ptrmem "${tfm[@]}" --head pointer --memory-aug & wait
  scorings="lstm-none:lstm:none lstm-resc:lstm:rescored lstm-cache:lstm:rescored:cache
    lstmptr-none:lstm-ptrmem:none lstmptr-resc:lstm-ptrmem:rescored tfm-none:tfm:none
    tfm-resc:tfm:rescored tfm-cache:tfm:rescored:cache tfmptr-none:tfm-ptrmem:none
    tfmptr-resc:tfm-ptrmem:rescored"
  mixes="lstm+tfmptr=lstm-resc+tfmptr-resc lstmptr+tfmptr=lstmptr-resc+tfmptr-resc lstm+tfm=lstm-resc+tfm-resc"
  for p in lstmptr-resc:lstm-resc tfmptr-resc:tfm-resc lstmptr-none:lstm-none tfmptr-none:tfm-none \
      lstm-resc:lstm-none lstmptr-resc:lstmptr-none tfm-resc:tfm-none tfmptr-resc:tfmptr-none \
      lstm-cache:lstm-resc tfm-cache:tfm-resc lstm+tfmptr:lstm-resc lstm+tfmptr:tfmptr-resc; do
    pairs+=(--pair "$p")
  done
else
  echo "$0: training 2 class-output LSTMs, $budget CPU-minutes each, $jobs at a time (logs in $out)"
  train lstm --arch lstm --head softmax & wait_jobs
  train lstmptr --arch lstm --head pointer --memory-aug & wait
  scorings="c-none:lstm:none c-resc:lstm:rescored c-cache:lstm:rescored:cache
    cptr-none:lstmptr:none cptr-resc:lstmptr:rescored cptr-cache:lstmptr:rescored:cache"
  mixes="c+cptr=c-resc+cptr-resc ccache+cptr=c-cache+cptr-resc ccache+cptrcache=c-cache+cptr-cache"
  for p in cptr-resc:c-resc cptr-none:c-none cptr-cache:c-cache c-resc:c-none cptr-resc:cptr-none \
      c-cache:c-resc cptr-cache:cptr-resc c+cptr:c-resc ccache+cptr:c-cache; do
    pairs+=(--pair "$p")
  done
fi
echo "$0: scoring the dev N-best set"
for spec in $scorings; do
  IFS=: read -r name model carry cache <<< "$spec"
  score "$name" "$model" "$carry" "$cache" & wait_jobs
done
wait
echo "$0: the ablation"
for n in $scorings; do n=${n%%:*}; sys+=(--system "$n=$S/$n/lmwt.nn"); done
for m in $mixes; do
  a=${m#*=}; b=${a#*+}; a=${a%+*}
  sys+=(--system "${m%%=*}=$S/$a/lmwt.nn+$S/$b/lmwt.nn")
done
python -m tools.experiments.ablation --nbest-dir "$DEV/nbest" --data-dir "$DEV/data" --train-text "$D/train.txt" \
  --wips=-1:3:0.5 --out-dir "$out/ablation" "${sys[@]}" "${pairs[@]}"
