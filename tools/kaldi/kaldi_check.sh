#!/usr/bin/env bash
# kaldi_check.sh: the drop-in steps run end to end with real Kaldi binaries.
#
# Usage: tools/kaldi/kaldi_check.sh KALDI_BIN_DIR [WORK_DIR]
#   KALDI_BIN_DIR  Kaldi's binaries (../shared/tools/build-kaldi.sh OUT_DIR/bin): lattice-*,
#                  nbest-*, linear-to-nbest, arpa2fst, arpa-to-const-arpa, compute-wer;
#                  fstcompile/fstproject from there or from PATH (Debian's libfst-tools).
#                  Kaldi's utils/ and steps/ from $KALDI_UTILS (default KALDI_BIN_DIR/../egs-utils).
#   WORK_DIR       where the Kaldi-like recipe dir is built (default: a new temporary dir)
# Environment: NJ (jobs, default 4), NBEST (N of the steps, default 20), WEIGHT (default 0.8),
#   CHECKS (names of the checks to run; unset: all, see CHECKS below; empty: none, the setup only), MODEL (a rescore
#   checkpoint; default a small random LSTM), KALDI_MODEL + KALDI_MODEL_OPTS (a model of Kaldi's
#   steps/pytorchnn/train.py and its lmrescore_nbest_pytorchnn.sh options; default a random LSTM).
#   REUSE=1 keeps a step's output from an earlier run of this check (its log says done) and
#   only verifies it again. rescore (rescore-nbest, rescore-wer, rescore-import-kaldi-lm) must
#   be on PATH.
#
# Setup: a decode dir from ../shared/data/tts-wikitext2-dev (its 100-best lists through
# linear-to-nbest | nbest-to-lattice, split into NJ jobs as utils/split_data.sh splits the data
# dir), a bigram ARPA built here from ../shared/data/wikitext2-asr/train.txt (tools/kaldi/arpa_bigram.py)
# made into G.carpa (arpa-to-const-arpa) and G.fst (arpa2fst), and a G.fst that leaves some words
# out, so that it rejects hypotheses and whole utterances.
# Each check runs a step and verifies its output (verify_output): exit status 0; every lattice
# reads with lattice-copy; the lattices' 1-best (lattice-best-path) equals rescore-nbest's on
# the step's N-best run in one process (at the step's OOV penalty); compute-wer equals
# rescore-wer on it.
# ours_tune also scores with Kaldi's steps/score_kaldi.sh (as local/score.sh), tunes on the
# step's output dir (rescore-tune, all NJ jobs) and reruns the step with --params: its 1-best is
# verified at the tuned setting, and its printed WERs against compute-wer's files and rescore-wer.
# To add a check: write check_NAME (use the setup's variables and verify_output) and add NAME to
# CHECKS. Prints one PASS/FAIL line per check and exits 1 if any failed.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then sed -n '2,30p' "$0"; exit 1; fi
kbin=$(cd "$1" && pwd)
work=${2:-$(mktemp -d /tmp/kaldi_check.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=kaldi_check_common.sh source-path=SCRIPTDIR
. "$repo/tools/kaldi/kaldi_check_common.sh"  # dev, train_text, kutils, nj, weight, s5; log, setup_recipe_dir ...
N=${NBEST:-20}
inv_acwt=10
CHECKS=${CHECKS-"ours_carpa ours_fst ours_fst_reject ours_two_models ours_cascade ours_tune pytorchnn_carpa pytorchnn_fst_reject lattice"}
# words the rejecting G.fst leaves out: every hypothesis of the first utterance has 'lobster'
reject_words=lobster,lobsters,claws

need_files "$dev/nbest/words" "$dev/data/text" "$train_text" "$kutils/utils/split_data.sh" \
           "$kutils/utils/run.pl" "$kbin/lattice-to-nbest" "$kbin/arpa2fst" "$kbin/compute-wer"
need_progs rescore-nbest rescore-wer rescore-import-kaldi-lm python3
kaldi_env
command -v fstproject >/dev/null || { echo "$0: fstproject not found (Debian: libfst-tools)"; exit 1; }
py=$(command -v python3)

# --- setup: recipe dir, data, lang dirs, decode dir, models ---------------------------------
setup() {
  setup_recipe_dir

  if [ ! -f data/lang/G.carpa ]; then
    log "setup: bigram ARPA from $train_text, G.carpa, G.fst"
    mkdir -p data/lang data/lang_reject data/local
    cp "$dev/lang/words.txt" data/lang/words.txt
    grep -q '^#0 ' data/lang/words.txt ||  # arpa2fst's disambiguation symbol
      awk '{ n = $2 } END { print "#0", n + 1 }' "$dev/lang/words.txt" >> data/lang/words.txt
    cp data/lang/words.txt data/lang_reject/words.txt
    "$py" "$repo/tools/kaldi/arpa_bigram.py" "$train_text" data/lang/words.txt data/local/lm.arpa
    "$py" "$repo/tools/kaldi/arpa_bigram.py" --drop "$reject_words" "$train_text" data/lang/words.txt \
      data/local/lm_reject.arpa
    arpa2fst --disambig-symbol='#0' --read-symbol-table=data/lang/words.txt data/local/lm.arpa \
      data/lang/G.fst 2> data/local/arpa2fst.log
    arpa2fst --disambig-symbol='#0' --read-symbol-table=data/lang/words.txt \
      data/local/lm_reject.arpa data/lang_reject/G.fst 2> data/local/arpa2fst_reject.log
    make_carpa
    mkdir -p data/lang_fst
    cp data/lang/words.txt data/lang/G.fst data/lang_fst/
  fi

  if [ ! -f exp/decode_dev/lat.1.gz ]; then
    log "setup: decode dir exp/decode_dev ($nj jobs) from the dev 100-best lists"
    mkdir -p exp/decode_dev/tmp
    echo "$nj" > exp/decode_dev/num_jobs
    for n in $(seq "$nj"); do
      t=exp/decode_dev/tmp/$n
      job_nbest "$n" "$t" words acwt lmwt.withlm
      linear-to-nbest "ark:$t/ali" "ark:$t/words" "ark:$t/lmwt.withlm" "ark:$t/acwt" ark:- \
        2>> exp/decode_dev/tmp/make.log | nbest-to-lattice ark:- "ark:|gzip -c > exp/decode_dev/lat.$n.gz" \
        2>> exp/decode_dev/tmp/make.log
    done
  fi

  mkdir -p models
  if [ -n "${MODEL:-}" ]; then
    ln -sfn "$MODEL" models/ours.pt
  elif [ ! -f models/ours.pt ]; then
    "$rescore_py" - data/lang/words.txt models/ours.pt <<'EOF'
import sys, torch
from rescore.models import ModelConfig, build_model, save_checkpoint
from rescore.io.symbols import read_vocabulary
torch.manual_seed(0)
vocab = read_vocabulary(sys.argv[1])
save_checkpoint(build_model(ModelConfig(arch="lstm", hidden=16, layers=1), vocab).eval(), sys.argv[2])
EOF
  fi
  if [ ! -f models/ours2.pt ]; then  # a second model for the interpolation check: a Transformer
    "$rescore_py" - data/lang/words.txt models/ours2.pt <<'EOF'
import sys, torch
from rescore.models import ModelConfig, build_model, save_checkpoint
from rescore.io.symbols import read_vocabulary
torch.manual_seed(1)
vocab = read_vocabulary(sys.argv[1])
cfg = ModelConfig(arch="transformer", hidden=16, layers=1, n_heads=2, context=8)
save_checkpoint(build_model(cfg, vocab).eval(), sys.argv[2])
EOF
  fi
  if [ ! -f models/gpt2/config.json ]; then  # a Hugging Face model for the cascade: a tiny random GPT-2
    head -3000 "$train_text" | grep -v '^ *$' | "$rescore_py" -c "
import sys
sys.path.insert(0, '$repo')
from tools.bench.bench_hf import save_random_gpt2
save_random_gpt2('models/gpt2', sys.stdin.read().splitlines(), vocab=500, layers=2, dim=32, heads=2, positions=256,
                 scale=4.0)"
  fi
  if [ -n "${KALDI_MODEL:-}" ]; then
    ln -sfn "$KALDI_MODEL" models/kaldi.pt
    kaldi_opts=${KALDI_MODEL_OPTS:?KALDI_MODEL needs KALDI_MODEL_OPTS (--model-type ... --nhead ...)}
  else
    kaldi_opts="--model-type LSTM --embedding-dim 16 --hidden-dim 16 --nlayers 1 --nhead 1"
    if [ ! -f models/kaldi.pt ]; then  # the state_dict of Kaldi's RNNModel (LSTM, tied)
      "$rescore_py" - data/lang/words.txt models/kaldi.pt <<'EOF'
import sys, torch
torch.manual_seed(1)
V = sum(1 for line in open(sys.argv[1]) if line.strip())
enc, rnn = torch.nn.Embedding(V, 16), torch.nn.LSTM(16, 16, 1)
torch.nn.init.uniform_(enc.weight, -0.1, 0.1)
sd = {"encoder.weight": enc.weight.detach(), "decoder.weight": enc.weight.detach(),
      "decoder.bias": torch.zeros(V), **{"rnn." + k: v for k, v in rnn.state_dict().items()}}
torch.save(sd, sys.argv[2])
EOF
    fi
  fi
}

# --- verification shared by the checks ------------------------------------------------------

# verify_output NAME OUT_DIR LANG STATE_CARRY DATA_FOR_CARRY: see the header. The setting of the
# 1-bests: V_WEIGHT, V_INV_ACWT, V_WIP (default: the step's, $weight, $inv_acwt and 0).
verify_output() {
  local name=$1 out=$2 lang=$3 carry=$4 cdata=$5 v=$2/check n total=0 got
  local vw=${V_WEIGHT:-$weight} via=${V_INV_ACWT:-$inv_acwt} vwip=${V_WIP:-0}
  mkdir -p "$v"
  for n in $(seq "$nj"); do
    lattice-copy "ark:gunzip -c $out/lat.$n.gz|" ark:/dev/null 2> "$v/copy.$n.log" ||
      { echo "FAIL $name: lattice-copy could not read $out/lat.$n.gz"; return 1; }
    got=$(sed -n 's/.*Done copying \([0-9]*\) lattices.*/\1/p' "$v/copy.$n.log")
    total=$((total + ${got:-0}))
  done
  local utts
  utts=$(wc -l < data/dev/text)
  [ "$total" -eq "$utts" ] || { echo "FAIL $name: $total lattices, expected $utts"; return 1; }
  # the lattices' 1-best with the new graph costs
  for n in $(seq "$nj"); do
    lattice-add-penalty --word-ins-penalty="$vwip" "ark:gunzip -c $out/lat.$n.gz|" ark:- 2>> "$v/best_path.log" |
      lattice-best-path --acoustic-scale="$(awk -v x="$via" 'BEGIN { print 1 / x }')" ark:- ark,t:- \
        2>> "$v/best_path.log"
  done | utils/int2sym.pl -f 2- "$lang/words.txt" | sed 's/ *$//' | sort > "$v/lattice_1best.txt"
  # rescore-nbest on the step's N-best, all jobs in one process
  mkdir -p "$v/nbest" "$v/nbest_data"
  local a
  for a in words_text acwt lmwt.withlm lmwt.nolm; do
    for n in $(seq "$nj"); do cat "$out/archives.$n/$a"; done > "$v/nbest/$a"
  done
  cp data/dev/text "$v/nbest_data/text"
  if [ "$cdata" = data ]; then
    cp data/dev/utt2spk data/dev/segments "$v/nbest_data/"
  else
    cat "$cdata"/*/utt2spk > "$v/nbest_data/utt2spk"
  fi
  local models=() m
  while read -r m; do models+=(--model "$m"); done < "$out/check.model"  # one line per model
  if [ -f "$out/check.mix" ]; then models+=(--mix "$(cat "$out/check.mix")"); fi
  # the step's --rescore-opts that change the 1-best (a cascade's limits), one per line
  if [ -f "$out/check.opts" ]; then while read -r m; do models+=("$m"); done < "$out/check.opts"; fi
  # the OOV penalty as the step's own rescore-nbest had it (run.pl's first log line is the
  # command): auto for ours, 0 for Kaldi's name; auto reads the step's words.txt or train text
  local cmdline opt val step_opts=()
  cmdline=$(head -1 "$(find "$out/log" -name 'rescore*.log' | sort | head -1)")
  for opt in --oov-penalty --words-txt --train-text; do
    val=$(sed -n "s/.* $opt \([^ ]*\).*/\1/p" <<< "$cmdline")
    [ -n "$val" ] && step_opts+=("$opt" "$val")
  done
  rescore-nbest "$v/nbest" "$v/rescored" --data-dir "$v/nbest_data" "${models[@]}" \
    --weight "$vw" --inv-acwt "$via" --wip "$vwip" --state-carry "$carry" "${step_opts[@]}" \
    --device cpu > "$v/rescore_nbest.log" 2>&1 ||
    { echo "FAIL $name: rescore-nbest on the N-best (log $v/rescore_nbest.log)"; return 1; }
  sed 's/ *$//' "$v/rescored/text" | sort > "$v/rescore_nbest_1best.txt"
  local differ
  differ=$(paste -d'\t' "$v/lattice_1best.txt" "$v/rescore_nbest_1best.txt" |
           awk -F'\t' '$1 != $2' | wc -l)
  # compute-wer against rescore-wer on the lattices' 1-best: the same WER and error count (the
  # split into ins/del/sub can differ where two alignments tie)
  compute-wer --text --mode=present "ark:data/dev/text" "ark:$v/lattice_1best.txt" \
    > "$v/compute_wer.txt" 2>&1
  rescore-wer data/dev/text "$v/lattice_1best.txt" > "$v/rescore_wer.txt" 2> /dev/null
  local kw rw
  kw=$(grep '^%WER' "$v/compute_wer.txt" | sed 's/ *$//')
  rw=$(grep '^%WER' "$v/rescore_wer.txt" | sed 's/  *(.*//')
  echo "  $name: lattices $total/$utts; 1-best lattice vs rescore-nbest: $((utts - differ))/$utts equal"
  echo "  $name: compute-wer: $kw"
  echo "  $name: rescore-wer: $rw"
  [ "$differ" -eq 0 ] || { echo "FAIL $name: $differ utterances' 1-best differ ($v)"; return 1; }
  [ "${kw%%,*}" = "${rw%%,*}" ] || { echo "FAIL $name: compute-wer and rescore-wer differ"; return 1; }
  echo "PASS $name"
}

# reused NAME: with REUSE=1, true when the step of check NAME finished in an earlier run.
reused() {
  [ "${REUSE:-0}" = 1 ] && grep -q ': done, rescored lattices in' "exp/$1.log" 2>/dev/null &&
    [ -f "exp/decode_dev_$1/check.model" ] && log "$1: reusing exp/decode_dev_$1 (REUSE=1)"
}

# run_ours NAME LANG_DIR [step options]: our step on the decode dir (MODELS: its model
# argument, default models/ours.pt; a colon list for several).
run_ours() {
  local name=$1 lang=$2 out=exp/decode_dev_$1 model=${MODELS:-models/ours.pt}
  shift 2
  if reused "$name"; then return 0; fi
  rm -rf "$out"
  log "$name: recipes/steps/lmrescore_nbest.sh $* $lang"
  if ! bash "$repo/recipes/steps/lmrescore_nbest.sh" --N "$N" --inv-acwt "$inv_acwt" \
      --weight "$weight" --device cpu --skip-scoring true "$@" \
      "$lang" "$model" data/dev exp/decode_dev "$out" > "exp/$name.log" 2>&1; then
    echo "FAIL $name: the step exited non-zero (exp/$name.log)"; tail -5 "exp/$name.log"; return 1
  fi
  # one line per model of the colon list, each path made absolute (hf:DIR: the part after hf:)
  sed 's/:hf:/:hf@/g; s/^hf:/hf@/' <<< "$model" | tr ':' '\n' |
    sed "s|^hf@|hf:$s5/|; /^hf:/! s|^|$s5/|" > "$out/check.model"
  grep -h 'warning' "exp/$name.log" | sed "s/^/  $name: /" | head -5 || true
}

# run_pytorchnn NAME LANG_DIR [options]: the drop-in for Kaldi's script, Kaldi's call.
run_pytorchnn() {
  local name=$1 lang=$2 out=exp/decode_dev_$1
  shift 2
  if reused "$name"; then return 0; fi
  rm -rf "$out"
  log "$name: recipes/steps/pytorchnn/lmrescore_nbest_pytorchnn.sh $kaldi_opts $* $lang"
  # $kaldi_opts is a list of options: it must split.
  # shellcheck disable=SC2086
  if ! bash "$repo/recipes/steps/pytorchnn/lmrescore_nbest_pytorchnn.sh" --cmd run.pl --N "$N" \
      $kaldi_opts --weight "$weight" --device cpu --skip-scoring true "$@" \
      "$lang" models/kaldi.pt data/lang/words.txt data/dev exp/decode_dev "$out" \
      > "exp/$name.log" 2>&1; then
    echo "FAIL $name: the step exited non-zero (exp/$name.log)"; tail -5 "exp/$name.log"; return 1
  fi
  local cache=models/kaldi.pt.rescore
  [ -f "$cache/model.pt" ] || cache=$out/nnlm
  echo "$s5/$cache/model.pt" > "$out/check.model"
  grep -h 'warning' "exp/$name.log" | sed "s/^/  $name: /" | head -5 || true
}

# --- the checks ---------------------------------------------------------------------------

check_ours_carpa() {
  run_ours ours_carpa data/lang && verify_output ours_carpa exp/decode_dev_ours_carpa data/lang rescored data
}

check_ours_fst() {
  run_ours ours_fst data/lang_fst && verify_output ours_fst exp/decode_dev_ours_fst data/lang_fst rescored data
}

# Two models interpolated: a colon list and --mix, checked against rescore-nbest
# --model A --model B --mix on the step's N-best (the models scored in lockstep in both).
check_ours_two_models() {
  local out=exp/decode_dev_ours_two_models
  MODELS=models/ours.pt:models/ours2.pt run_ours ours_two_models data/lang --mix 0.6,0.4 || return 1
  echo "0.6,0.4" > "$out/check.mix"
  verify_output ours_two_models "$out" data/lang rescored data
}

# A cascade (--rescore-opts "--cascade-top 3"): the cheap model on every hypothesis, a Hugging
# Face model (hf:DIR in the colon list) on each utterance's top 3; the step writes lmwt.cascade,
# and the lattices' 1-best is rescore-nbest's with the same cascade (the others, out of reach by
# +10,000 nats in lmwt.interp, never win in Kaldi's search either). Then K tuned on the step's
# output, and the step again with that --params file.
check_ours_cascade() {
  local out=exp/decode_dev_ours_cascade
  MODELS=models/ours.pt:hf:models/gpt2 run_ours ours_cascade data/lang --mix 0.5,0.5 \
    --rescore-opts "--cascade-top 3" || return 1
  echo "0.5,0.5" > "$out/check.mix"
  printf '%s\n' --cascade-top 3 > "$out/check.opts"
  local n
  for n in $(seq "$nj"); do
    [ -s "$out/archives.$n/lmwt.cascade" ] || { echo "FAIL ours_cascade: no $out/archives.$n/lmwt.cascade"; return 1; }
  done
  verify_output ours_cascade "$out" data/lang rescored data || return 1
  # K tuned on the step's output dir (rescore-tune --cascade, here K = 2 alone) into --params-out,
  # and the step again with --params alone: it applies the file's cascade (its lattices' 1-best is
  # rescore-nbest --cascade-top 2's)
  local tuned=exp/ours_cascade_params.json out2=exp/decode_dev_ours_cascade_params
  if ! rescore-tune "$out" --data-dir data/dev --nn-costs lmwt.nn.1 --nn-costs lmwt.nn.2 --cascade lmwt.cascade \
      --cascade-tops 2 --weights "$weight" --inv-acwts "$inv_acwt" --wips 0 --mixes 0.5 --params-out "$tuned" \
      > exp/ours_cascade_tune.log 2>&1; then
    echo "FAIL ours_cascade: rescore-tune --cascade on the step's output (exp/ours_cascade_tune.log)"; return 1
  fi
  tr -d ' \n' < "$tuned" | grep -q '"cascade":{"top":2,' ||
    { echo "FAIL ours_cascade: $tuned records no cascade-top 2"; return 1; }
  MODELS=models/ours.pt:hf:models/gpt2 run_ours ours_cascade_params data/lang --params "$tuned" || return 1
  grep -rq "cascade from --params" "$out2/log" ||
    { echo "FAIL ours_cascade: the step with --params did not apply its cascade ($out2/log)"; return 1; }
  echo "0.5,0.5" > "$out2/check.mix"
  printf '%s\n' --cascade-top 2 > "$out2/check.opts"
  verify_output ours_cascade_params "$out2" data/lang rescored data
}

# G.fst without the reject words: the hypotheses with them are dropped, utterances whose every
# hypothesis has one keep their first-pass best.
check_ours_fst_reject() {
  local out=exp/decode_dev_ours_fst_reject
  run_ours ours_fst_reject data/lang_reject || return 1
  check_rejections ours_fst_reject "$out" || return 1
  verify_output ours_fst_reject "$out" data/lang_reject rescored data
}

check_rejections() {
  local name=$1 out=$2 lost rescued
  lost=$(grep -c 'hypotheses lost in the old-LM removal' "exp/$name.log" || true)
  rescued=$(grep 'lost every hypothesis' "exp/$name.log" | sed 's/.*utterance \([^ ]*\) lost.*/\1/' || true)
  [ "$lost" -gt 0 ] || { echo "FAIL $name: no hypothesis was rejected by the G.fst"; return 1; }
  [ -n "$rescued" ] || { echo "FAIL $name: no utterance lost every hypothesis"; return 1; }
  echo "  $name: $lost jobs lost hypotheses; utterances rescued: $(echo "$rescued" | wc -l)"
  # their 1-best is their first-pass best: rank 1 of the decode's N-best
  lattice-to-nbest --acoustic-scale="$(awk -v x=$inv_acwt 'BEGIN { print 1 / x }')" --n=1 \
    "ark:gunzip -c exp/decode_dev/lat.*.gz|" ark:- 2>/dev/null |
    nbest-to-linear ark:- ark:/dev/null ark,t:- 2>/dev/null |
    utils/int2sym.pl -f 2- data/lang/words.txt | sed 's/-1 / /; s/ *$//' > "$out/check.first_pass.txt"
  local u first got
  for u in $rescued; do
    first=$(awk -v u="$u" '$1 == u' "$out/check.first_pass.txt")
    got=$(awk -v u="$u" '$1 == u' "$out/text" | sed 's/ *$//')
    [ "$first" = "$got" ] || { echo "FAIL $name: rescued $u: '$got', first pass '$first'"; return 1; }
  done
}

# Tuning a 4-job decode: Kaldi's steps/score_kaldi.sh as the recipe's local/score.sh; the first
# pass scored; our step on the decode (scored, its WER summary); rescore-tune on the step's output
# dir (all jobs) -> params.json; the step again with --params; its lattices' 1-best at the tuned
# setting and its text equal rescore-nbest --params on the step's N-best; its printed WERs equal
# compute-wer's files and rescore-wer.
check_ours_tune() {
  local name=ours_tune out=exp/decode_dev_ours_tuned tuned=exp/decode_dev_ours_tune params=exp/ours_tune.params.json
  mkdir -p local
  ln -sfn ../steps/score_kaldi.sh local/score.sh
  if [ ! -f exp/decode_dev/scoring_kaldi/best_wer ]; then
    log "$name: local/score.sh (Kaldi's steps/score_kaldi.sh) on the first pass"
    local/score.sh --cmd run.pl data/dev data/lang exp/decode_dev > exp/score_first_pass.log 2>&1 ||
      { echo "FAIL $name: scoring the first pass (exp/score_first_pass.log)"; return 1; }
  fi
  if ! reused "$name"; then
    rm -rf "$tuned"
    log "$name: recipes/steps/lmrescore_nbest.sh on exp/decode_dev ($nj jobs), scored"
    bash "$repo/recipes/steps/lmrescore_nbest.sh" --N "$N" --inv-acwt "$inv_acwt" --weight "$weight" \
      --device cpu data/lang models/ours.pt data/dev exp/decode_dev "$tuned" > "exp/$name.log" 2>&1 ||
      { echo "FAIL $name: the step exited non-zero (exp/$name.log)"; tail -5 "exp/$name.log"; return 1; }
  fi
  log "$name: rescore-tune $tuned (all $nj jobs)"
  rescore-tune "$tuned" --data-dir data/dev --weights 0:1:0.1 --inv-acwts 8:14:1 --wips=-1:2:0.5 \
    --params-out "$params" --hyp-out exp/ours_tune.hyp.txt > exp/ours_tune.tune.log 2>&1 ||
    { echo "FAIL $name: rescore-tune (exp/ours_tune.tune.log)"; tail -3 exp/ours_tune.tune.log; return 1; }
  grep -h '^best setting\|^tuned on' exp/ours_tune.tune.log | sed "s/^/  $name: /"
  local w ia wip
  read -r w ia wip < <(python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(p['weight'], p['inv_acwt'], p['wip'])" "$params")
  rm -rf "$out"
  log "$name: the step with --params $params"
  bash "$repo/recipes/steps/lmrescore_nbest.sh" --N "$N" --params "$params" --device cpu \
    data/lang models/ours.pt data/dev exp/decode_dev "$out" > "exp/${name}d.log" 2>&1 ||
    { echo "FAIL $name: the step with --params exited non-zero (exp/${name}d.log)"; tail -5 "exp/${name}d.log"; return 1; }
  echo "$s5/models/ours.pt" > "$out/check.model"
  grep -A6 'WER against' "exp/${name}d.log" | sed "s|^$repo/recipes/steps/||; s/^/  $name: /"
  # the printed WERs: the grid lines are compute-wer's files, the others rescore-wer's
  local line file expect
  for which in "first pass, best" "rescored,   best"; do
    line=$(grep "$which of local/score.sh's grid" "exp/${name}d.log")
    file=$(awk '{ print $NF }' <<< "$line")
    expect=$(grep WER "$file")
    [ "${line#*grid: }" = "$expect $file" ] ||
      { echo "FAIL $name: printed '${line#*grid: }', $file has '$expect'"; return 1; }
  done
  expect=$(rescore-wer --allow-missing data/dev/text "$out/text" 2>/dev/null | grep '^%WER')
  grep -qF "rescored ($out/text): $expect" "exp/${name}d.log" ||
    { echo "FAIL $name: the step's rescored WER is not rescore-wer's ($expect)"; return 1; }
  cmp -s <(sed 's/ *$//' "$out/text" | sort) <(sed 's/ *$//' exp/ours_tune.hyp.txt | sort) &&
    echo "  $name: the tuned step's 1-best = rescore-tune's predicted 1-best" ||
    echo "  $name: the tuned step's 1-best differs from rescore-tune's prediction (costs scored with carry at weight $weight)"
  V_WEIGHT=$w V_INV_ACWT=$ia V_WIP=$wip verify_output "$name" "$out" data/lang rescored data || return 1
  cmp -s <(sed 's/ *$//' "$out/text" | sort) "$out/check/rescore_nbest_1best.txt" ||
    { echo "FAIL $name: the step's text differs from rescore-nbest --params"; return 1; }
  echo "  $name: the step's text = rescore-nbest at weight $w inv_acwt $ia wip $wip"
}

check_pytorchnn_carpa() {
  run_pytorchnn pytorchnn_carpa data/lang &&
    verify_output pytorchnn_carpa exp/decode_dev_pytorchnn_carpa data/lang rescored data
}

check_pytorchnn_fst_reject() {
  local out=exp/decode_dev_pytorchnn_fst_reject
  run_pytorchnn pytorchnn_fst_reject data/lang_reject --carry kaldi || return 1
  check_rejections pytorchnn_fst_reject "$out" || return 1
  verify_output pytorchnn_fst_reject "$out" data/lang_reject first-pass "$out/carry_data"
}

# The lattice step: tools/kaldi/kaldi_check_lattice.sh in WORK_DIR/lattice, with a decode
# dir of its own (its lattices' old LM is exactly the G.carpa it removes; see its header).
check_lattice() {
  if NJ=$nj WEIGHT=$weight INV_ACWT=$inv_acwt KALDI_UTILS=$kutils CHECKS="lattice_default lattice_is_nbest" \
      bash "$repo/tools/kaldi/kaldi_check_lattice.sh" "$kbin" "$work/lattice" > "$work/lattice.log" 2>&1; then
    grep -v '^\[' "$work/lattice.log"; echo "PASS lattice"
  else
    grep -v '^\[' "$work/lattice.log" | tail -8; echo "FAIL lattice ($work/lattice.log)"; return 1
  fi
}

log "kaldi_check: $kbin, work dir $work, $nj jobs, N=$N, weight $weight"
setup
cd "$s5"
failed=0
for c in $CHECKS; do
  if ! "check_$c"; then failed=$((failed + 1)); fi
done
log "kaldi_check: $failed of $(echo "$CHECKS" | wc -w) checks failed"
[ "$failed" -eq 0 ]
