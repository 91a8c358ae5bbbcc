#!/usr/bin/env bash
# kaldi_check_lattice.sh: the lattice step (recipes/steps/lmrescore_lattice.sh) end to end with
# real Kaldi binaries, and against the N-best step on the same decode dir.
#
# Usage: tools/kaldi/kaldi_check_lattice.sh KALDI_BIN_DIR WORK_DIR
#   KALDI_BIN_DIR  Kaldi's binaries (../shared/tools/build-kaldi.sh OUT_DIR/bin); Kaldi's utils/
#                  from $KALDI_UTILS (default KALDI_BIN_DIR/../egs-utils)
#   WORK_DIR       the recipe dir is built there (kept: later runs reuse the setup)
# Environment: NJ (jobs, default 4), WEIGHT (default 0.8), INV_ACWT (default 10), MODEL (a rescore
#   checkpoint; default a small random LSTM), ARPA_BIGRAM (default tools/kaldi/arpa_bigram.py),
#   STEP_OPTS (more options for both steps, e.g. "--oov-penalty auto --train-text ..."),
#   REUSE=1 (keep the runs already in WORK_DIR: same settings assumed); for CHECKS=compare:
#   WEIGHTS, INV_ACWTS, WIPS (the tuning grid), TUNE_LATTICES (the lattice runs to tune),
#   FULL_BEAM=1 (also the lattice step with beam 1000 on the N-best-shaped decode dir).
#   rescore (rescore-nbest, rescore-lattice) must be on PATH.
#
# Setup: a decode dir from ../shared/data/tts-wikitext2-dev whose old LM is exactly the G.carpa
# removed later: each 100-best entry's graph cost is the benchmark's lmwt.nolm plus a bigram
# ARPA's cost (built from ../shared/data/wikitext2-asr/train.txt; lattice-lmrescore-const-arpa
# adds it), then linear-to-nbest | nbest-to-lattice, NJ jobs as utils/split_data.sh splits the
# data dir. Such lattices are N-best-shaped: a union of the 100 linear entries.
# Checks (one PASS/FAIL line each; exit 1 if any failed):
#   lattice_default  the step with Kaldi's settings (beam 5, epsilon 0.5) exits 0; every output
#                    lattice reads back with lattice-copy; its 'text' is lattice-best-path's.
#   lattice_is_nbest with a beam that keeps every path, the lattice step's 1-best equals the
#                    N-best step's at N=100 on the same decode dir, utterance by utterance
#                    (exact ties aside).
# CHECKS="compare" instead runs the WER and time comparison of docs/benchmarks.md (see below).
set -euo pipefail

if [ $# -ne 2 ]; then sed -n '2,26p' "$0"; exit 1; fi
kbin=$(cd "$1" && pwd)
mkdir -p "$2"
work=$(cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=kaldi_check_common.sh source-path=SCRIPTDIR
. "$repo/tools/kaldi/kaldi_check_common.sh"  # dev, train_text, kutils, nj, weight, s5; log, setup_recipe_dir ...
arpa_bigram=${ARPA_BIGRAM:-$repo/tools/kaldi/arpa_bigram.py}
inv_acwt=${INV_ACWT:-10}
step_opts=${STEP_OPTS:-}
need_files "$dev/nbest/words" "$train_text" "$kutils/utils/split_data.sh" "$arpa_bigram" \
           "$kbin/lattice-path-cover" "$kbin/arpa-to-const-arpa"
need_progs rescore-nbest rescore-lattice python3
kaldi_env

setup() {
  setup_recipe_dir
  if [ ! -f data/lang/G.carpa ]; then
    log "setup: bigram ARPA from $train_text -> data/lang/G.carpa"
    mkdir -p data/lang data/local
    cp "$dev/lang/words.txt" data/lang/words.txt  # it has <s>, </s> and #0
    python3 "$arpa_bigram" "$train_text" data/lang/words.txt data/local/lm.arpa
    make_carpa
  fi
  if [ ! -f exp/decode_dev/lat.1.gz ]; then
    log "setup: exp/decode_dev ($nj jobs): the 100-best lists with lmwt.nolm + bigram as graph cost"
    mkdir -p exp/decode_dev/tmp
    echo "$nj" > exp/decode_dev/num_jobs
    for n in $(seq "$nj"); do
      t=exp/decode_dev/tmp/$n
      job_nbest "$n" "$t" words acwt lmwt.nolm
      linear-to-nbest "ark:$t/ali" "ark:$t/words" "ark:$t/lmwt.nolm" "ark:$t/acwt" ark:- 2>> "$t/make.log" |
        lattice-lmrescore-const-arpa --lm-scale=1.0 ark:- data/lang/G.carpa ark:- 2>> "$t/make.log" |
        nbest-to-lattice ark:- "ark:|gzip -c > exp/decode_dev/lat.$n.gz" 2>> "$t/make.log"
    done
  fi
  if [ ! -f exp/decode_dev_min/lat.1.gz ]; then
    # The same 100 word sequences per utterance as one word graph: shared prefixes and, after
    # minimization, shared suffixes (arcs with several histories, several arcs between two
    # states): what the path cover's estimate is for. lattice-to-nbest gives the same lists.
    log "setup: exp/decode_dev_min: exp/decode_dev determinized, pushed and minimized"
    mkdir -p exp/decode_dev_min/log
    cp exp/decode_dev/num_jobs exp/decode_dev_min/
    for n in $(seq "$nj"); do
      lattice-determinize-pruned --acoustic-scale=0.1 --beam=1000 "ark:gunzip -c exp/decode_dev/lat.$n.gz|" ark:- |
        lattice-push ark:- ark:- | lattice-minimize ark:- "ark:|gzip -c > exp/decode_dev_min/lat.$n.gz"
    done 2> exp/decode_dev_min/log/make.log
  fi
  mkdir -p models
  if [ -n "${MODEL:-}" ]; then
    ln -sfn "$MODEL" models/nnlm.pt
  elif [ ! -f models/nnlm.pt ]; then
    "$rescore_py" - data/lang/words.txt models/nnlm.pt <<'EOF'
import sys, torch
from rescore.models import ModelConfig, build_model, save_checkpoint
from rescore.io.symbols import read_vocabulary
torch.manual_seed(0)
vocab = read_vocabulary(sys.argv[1])  # every word: rescore-nbest refuses an LM that lacks most
save_checkpoint(build_model(ModelConfig(arch="lstm", hidden=16, layers=1), vocab).eval(), sys.argv[2])
EOF
  fi
}

# run STEP NAME [options]: a step on the decode dir into exp/NAME, timed into exp/NAME.time.
run() {
  local step=$1 name=$2 out=exp/$2 t0 t1
  shift 2
  if [ "${REUSE:-0}" = 1 ] && [ -f "$out/text" ] && [ -f "exp/$name.time" ]; then
    log "$name: reusing $out"; return 0
  fi
  rm -rf "$out"
  log "$name: recipes/steps/$step $*"
  t0=$(date +%s.%N)
  # $step_opts is a list of options: it must split.
  # shellcheck disable=SC2086
  if ! bash "$repo/recipes/steps/$step" --inv-acwt "$inv_acwt" --weight "$weight" --device cpu \
      --skip-scoring true $step_opts "$@" data/lang models/nnlm.pt data/dev "${decode:-exp/decode_dev}" "$out" \
      > "exp/$name.log" 2>&1; then
    echo "FAIL $name: the step exited non-zero (exp/$name.log)"; tail -5 "exp/$name.log"; return 1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' > "exp/$name.time"
  log "$name: $(cat "exp/$name.time") s"
}

# read_back NAME: every output lattice reads with lattice-copy; one per utterance.
read_back() {
  local out=exp/$1 n got total=0 utts
  for n in $(seq "$nj"); do
    lattice-copy "ark:gunzip -c $out/lat.$n.gz|" ark:/dev/null 2> "$out/log/copy_back.$n.log" ||
      { echo "FAIL $1: lattice-copy could not read $out/lat.$n.gz"; return 1; }
    got=$(sed -n 's/.*Done copying \([0-9]*\) lattices.*/\1/p' "$out/log/copy_back.$n.log")
    total=$((total + ${got:-0}))
  done
  utts=$(wc -l < data/dev/text)
  [ "$total" -eq "$utts" ] || { echo "FAIL $1: $total lattices read back, expected $utts"; return 1; }
  echo "  $1: $total/$utts lattices read back with lattice-copy"
}

check_lattice_default() {
  run lmrescore_lattice.sh lattice_default || return 1
  read_back lattice_default || return 1
  local paths
  paths=$(cat exp/lattice_default/cover/archives.*/words | wc -l)
  echo "  lattice_default: $paths cover paths scored ($(awk -v p="$paths" -v u="$(wc -l < data/dev/text)" \
    'BEGIN { printf "%.1f", p / u }') per utterance; the decode dir has $(wc -l < "$dev/nbest/words") entries)"
  grep -h "expanded from" exp/lattice_default/log/prune_expand.*.log | sed 's/^.*Overall/  lattice_default: lattice-expand: Overall/' | head -1
  echo "PASS lattice_default"
}

check_lattice_is_nbest() {
  run lmrescore_nbest.sh nbest100 --N 100 || return 1
  run lmrescore_lattice.sh lattice_all --beam 1000 || return 1
  read_back lattice_all || return 1
  # utterance by utterance; where the words differ, the two must tie in the N-best step's own
  # final costs (hypotheses with equal acoustic and LM costs exist: words that are OOV for both
  # LMs with the same pronunciation)
  if "$rescore_py" - exp/nbest100 exp/lattice_all/text "$inv_acwt" <<'EOF'
import glob, sys
d, text, inv_acwt = sys.argv[1], sys.argv[2], float(sys.argv[3])
def table(name):
    return {l.split()[0]: l.split()[1:] for f in sorted(glob.glob(f"{d}/archives.*/{name}")) for l in open(f)}
words, ac, interp = table("words_text"), table("acwt"), table("lmwt.interp")
cost = {}
for k, w in words.items():
    cost[(k.rsplit("-", 1)[0], tuple(w))] = float(ac[k][0]) / inv_acwt + float(interp[k][0])
ours = {l.split()[0]: tuple(l.split()[1:]) for l in open(f"{d}/text")}
lat = {l.split()[0]: tuple(l.split()[1:]) for l in open(text)}
assert set(ours) == set(lat), "different utterances"
same = sum(ours[u] == lat[u] for u in ours)
ties = [u for u in ours if ours[u] != lat[u] and abs(cost[(u, ours[u])] - cost[(u, lat[u])]) < 1e-3]
other = [u for u in ours if ours[u] != lat[u] and u not in ties]
print(f"  lattice_is_nbest: 1-best of the lattice step (beam 1000) vs the N-best step (N=100): "
      f"{same}/{len(ours)} equal, {len(ties)} exact ties broken the other way, {len(other)} other")
for u in other[:3]:
    print(f"  lattice_is_nbest: {u}: {' '.join(lat[u])} ({cost.get((u, lat[u]))}) vs {' '.join(ours[u])} ({cost[(u, ours[u])]})")
sys.exit(1 if other else 0)
EOF
  then echo "PASS lattice_is_nbest"; else echo "FAIL lattice_is_nbest"; return 1; fi
}

# compare: not a check but the measurement of docs/benchmarks.md: the lattice step
# (beam 5 and beam 1000) against the N-best step at N=20 and N=100 with MODEL, each timed; the
# WER tuned on the whole set and split-half over the same grid (rescore-tune for the N-best
# runs; rescore-lattice tune for the lattice runs, whose NN weight needs a rerun of stage 4 per
# weight: the weight is in the lattices' costs).
grid_weights=${WEIGHTS:-0:1:0.1}
grid_inv_acwts=${INV_ACWTS:-6:16:0.5}
grid_wips=${WIPS:--1:3:0.5}
merge_nbest() {  # merge_nbest RUN -> exp/RUN/merged: one N-best dir of all jobs
  local m=exp/$1/merged a
  mkdir -p "$m"
  for a in words_text acwt lmwt.withlm lmwt.nolm lmwt.nn; do cat exp/"$1"/archives.*/"$a" > "$m/$a"; done
}
tune_nbest() {
  local r=exp/$1/merged
  rescore-tune "$r" --data-dir data/dev --nn-costs "$r/lmwt.nn" --weights "$grid_weights" \
    --inv-acwts "$grid_inv_acwts" --wips="$grid_wips" 2>/dev/null | sed "s/^/  $1: /"
  rescore-tune "$r" --data-dir data/dev --nn-costs "$r/lmwt.nn" --weights "$grid_weights" \
    --inv-acwts "$grid_inv_acwts" --wips="$grid_wips" --split-half 2>/dev/null | grep "held out" | sed "s/^/  $1 split half: /"
}
tune_lattice() {
  local run=$1 w d specs=""
  for w in $("$rescore_py" -c "from rescore.cli.common import parse_grid; print(*parse_grid('$grid_weights', 'w'))"); do
    d=exp/${run}_w/$w
    if [ ! -f "$d/lat.1.gz" ]; then
      mkdir -p "$d"
      ln -sfn "$s5/exp/$run/expanded" "$d/expanded"
      ln -sfn "$s5/exp/$run/cover" "$d/cover"
      # $step_opts is a list of options: it must split.
      # shellcheck disable=SC2086
      bash "$repo/recipes/steps/lmrescore_lattice.sh" --stage 4 --inv-acwt "$inv_acwt" --weight "$w" \
        --skip-scoring true $step_opts data/lang models/nnlm.pt data/dev exp/decode_dev "$d" > "$d.log" 2>&1 ||
        { echo "FAIL compare: stage 4 at weight $w ($d.log)"; return 1; }
    fi
    specs="$specs $w=$d"
  done
  # $specs is a list of arguments: it must split.
  # shellcheck disable=SC2086
  "$(dirname "$rescore_py")/rescore-lattice" tune --nbest-dir "$dev/nbest" --data-dir data/dev \
    --words-txt data/lang/words.txt --inv-acwts "$grid_inv_acwts" --wips="$grid_wips" \
    --report "exp/$run.tune.json" $specs 2>/dev/null | sed "s/^/  $run: /"
}
check_compare() {
  local r
  for r in 20 100; do
    run lmrescore_nbest.sh "nbest$r" --N "$r" || return 1
    merge_nbest "nbest$r"
  done
  run lmrescore_lattice.sh lattice_default || return 1
  if [ "${FULL_BEAM:-0}" = 1 ]; then  # its 1-best is the N=100 step's (check lattice_is_nbest)
    run lmrescore_lattice.sh lattice_all --beam 1000 || return 1
  fi
  decode=exp/decode_dev_min run lmrescore_lattice.sh lattice_min || return 1
  decode=exp/decode_dev_min run lmrescore_lattice.sh lattice_min_all --beam 1000 || return 1
  for r in nbest20 nbest100 lattice_default lattice_all lattice_min lattice_min_all; do
    [ -f "exp/$r.time" ] || continue
    echo "  $r: $(cat "exp/$r.time") s wall ($(cat exp/"$r"/*/archives.*/words exp/"$r"/archives.*/words 2>/dev/null | wc -l) hypotheses scored)"
  done
  tune_nbest nbest20 && tune_nbest nbest100
  # lattice_all's 1-best is the N=100 step's (check lattice_is_nbest): not tuned by default
  for r in ${TUNE_LATTICES:-lattice_default lattice_min lattice_min_all}; do tune_lattice "$r" || return 1; done
}

log "kaldi_check_lattice: $kbin, work dir $work, $nj jobs, weight $weight, inv-acwt $inv_acwt"
setup
cd "$s5"
failed=0
for c in ${CHECKS:-lattice_default lattice_is_nbest}; do
  if ! "check_$c"; then failed=$((failed + 1)); fi
done
log "kaldi_check_lattice: $failed checks failed"
[ "$failed" -eq 0 ]
