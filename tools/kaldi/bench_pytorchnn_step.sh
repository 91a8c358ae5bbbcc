#!/usr/bin/env bash
# bench_pytorchnn_step.sh: Kaldi's own steps/pytorchnn/lmrescore_nbest_pytorchnn.sh against the
# drop-in step of the same name (recipes/steps/pytorchnn), whole steps, the same model, lattices
# and options: CPU seconds (user + sys of the step and every process it waits for) and wall
# seconds, rounds interleaved, and each run's 1-best compared with Kaldi's (tools/kaldi/compare_pytorchnn.py).
#
# Usage: tools/kaldi/bench_pytorchnn_step.sh KALDI_BIN_DIR WORK_DIR MODEL
#   KALDI_BIN_DIR  Kaldi's binaries (../shared/tools/build-kaldi.sh OUT_DIR/bin), as tools/kaldi/kaldi_check.sh
#   WORK_DIR       the recipe dir of tools/kaldi/kaldi_check.sh is set up (or reused) under it
#   MODEL          one of our checkpoints: an LSTM with a softmax head, tied (what Kaldi's scorer
#                  can hold); it is exported into Kaldi's format with tools/kaldi/bench_kaldi_real.py
# Environment: NJ (jobs, default 4), NBEST (N, default 20), ROUNDS (default 1), RUNS (default
#   "kaldi ours-kaldi ours": Kaldi's step; ours with --carry kaldi; ours with its default carry;
#   ours-kaldi-per-job and ours-per-job: the same with one rescore-nbest process per job,
#   --one-process false, where run.pl otherwise gets one process for all jobs). Suffixes of
#   ours' runs, in this order: -per-job; -none (--rescore-opts "--normalize none": for a
#   self-normalised model); -int8 (--precision int8); -torch (RESCORE_NATIVE=0: the LSTM cell
#   in PyTorch's kernels, not the fused one); -cached (the model imported by an earlier run is
#   kept, as on every run after the first with that model; run one without it first).
# Example:
#   PATH=$PWD/.venv/bin:$PATH tools/kaldi/bench_pytorchnn_step.sh ~/kaldi-build/bin /tmp/step exp/sn-lstm/model.pt
# Every step runs with one thread per job (OMP_NUM_THREADS=1 MKL_NUM_THREADS=1). Prints one line
# per run and a markdown table of medians.
set -euo pipefail
if [ $# -ne 3 ]; then sed -n '2,20p' "$0"; exit 1; fi
kbin=$(cd "$1" && pwd)
mkdir -p "$2"
work=$(cd "$2" && pwd)
model=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
repo=$(cd "$(dirname "$0")/../.." && pwd)
nj=${NJ:-4}; N=${NBEST:-20}; rounds=${ROUNDS:-1}; runs=${RUNS:-"kaldi ours-kaldi ours"}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# the model in Kaldi's format (model.pt + vocabulary) and its sizes
mkdir -p "$work/export"
opts=$(python3 - "$model" "$work/export" "$repo/tools" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from bench_kaldi_real import export_kaldi_lm
k = export_kaldi_lm(sys.argv[1], sys.argv[2], sent_boundary="<s>")  # the steps' default
print(f"--model-type {k['model']} --embedding-dim {k['emsize']} --hidden-dim {k['nhid']} "
      f"--nlayers {k['nlayers']} --nhead 1 {k['model_path']} {k['vocabulary']}")
PY
)
read -r -a kopts <<< "${opts% * *}"
read -r kmodel kvocab <<< "$(echo "$opts" | awk '{print $(NF-1), $NF}')"

# the recipe dir (lattices of the dev 100-best lists in $nj jobs, G.carpa): tools/kaldi/kaldi_check.sh's setup
NJ=$nj CHECKS="" KALDI_MODEL=$kmodel KALDI_MODEL_OPTS="${kopts[*]}" \
  bash "$repo/tools/kaldi/kaldi_check.sh" "$kbin" "$work/check" > "$work/setup.log" 2>&1 ||
  { echo "$0: setup failed ($work/setup.log)"; tail -5 "$work/setup.log"; exit 1; }
cd "$work/check/s5"
export PATH=$kbin:$PATH LC_ALL=C

step() {  # NAME: run one step, print "NAME user sys wall"
  local name=$1 out=exp/bench_$1 script=$repo/recipes/steps/pytorchnn/lmrescore_nbest_pytorchnn.sh
  local extra=()
  local base=$name opts=() keep=false native=1
  # suffixes, in this order: -per-job, -none, -int8, -torch, -cached
  case $base in *-cached) keep=true; base=${base%-cached};; esac
  case $base in *-torch) native=0; base=${base%-torch};; esac
  case $base in *-int8) opts+=(--precision int8); base=${base%-int8};; esac
  case $base in *-none) opts+=(--normalize none); base=${base%-none};; esac
  case $base in *-per-job) extra+=(--one-process false); base=${base%-per-job};; esac
  case $base in
    kaldi) script=steps/pytorchnn/lmrescore_nbest_pytorchnn.sh;;  # Kaldi's own (utils/steps of the snapshot)
    ours-kaldi) extra+=(--carry kaldi --device cpu);;
    ours) extra+=(--device cpu);;
    *) echo "$0: unknown run $name"; exit 1;;
  esac
  [ ${#opts[@]} -gt 0 ] && extra+=(--rescore-opts "${opts[*]}")
  rm -rf "$out"
  # ours imports the model again each run, as a first run does; -cached: the import of an
  # earlier run is kept, as on every later run with the same model
  $keep || rm -rf "$kmodel.rescore"
  RESCORE_NATIVE=$native /usr/bin/time -f "%U %S %e" -o "exp/bench_$name.time" bash "$script" --cmd run.pl --N "$N" \
    "${kopts[@]}" --weight 0.8 --skip-scoring true "${extra[@]}" data/lang "$kmodel" "$kvocab" \
    data/dev exp/decode_dev "$out" > "exp/bench_$name.log" 2>&1 ||
    { echo "$0: $name failed (exp/bench_$name.log)"; tail -5 "exp/bench_$name.log"; exit 1; }
  echo "$name $(cat "exp/bench_$name.time")"
}

results=$work/results.txt
: > "$results"
for _ in $(seq "$rounds"); do
  for name in $runs; do step "$name" | tee -a "$results"; done
done
for name in $runs; do
  # (to a file first: under pipefail, head closing the pipe early would end the script)
  [ "$name" = kaldi ] && continue
  python3 "$repo/tools/kaldi/compare_pytorchnn.py" exp/bench_kaldi "exp/bench_$name" > "exp/bench_$name.compare"
  head -3 "exp/bench_$name.compare" | sed "s/^/$name vs kaldi: /"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, u, s, w = line.split()
    rows.setdefault(name, []).append((float(u) + float(s), float(u), float(s), float(w)))
base = statistics.median(r[0] for r in rows["kaldi"]) if "kaldi" in rows else None
print("| step | CPU s (user + sys) | user | sys | wall s | Kaldi / this |")
print("|---|---:|---:|---:|---:|---:|")
for name, rs in rows.items():
    med = [statistics.median(r[i] for r in rs) for i in range(4)]
    ratio = f"{base / med[0]:.2f}" if base else ""
    print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {med[3]:.1f} | {ratio} |")
PY
