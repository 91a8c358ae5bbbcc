# kaldi_check_common.sh: what tools/kaldi/kaldi_check.sh and tools/kaldi/kaldi_check_lattice.sh share.
# Sourced by both (not run) once they have set kbin (Kaldi's binaries), work (the work dir) and
# repo (this checkout), all absolute. It sets the shared data's paths and the settings both read
# from the environment (KALDI_UTILS, NJ, WEIGHT), and defines:
#   log MSG...                   a timestamped line
#   need_files FILE...           exit 1 naming the first one that does not exist
#   need_progs PROG...           exit 1 naming the first one not on PATH
#   kaldi_env                    Kaldi's binaries first on PATH, LC_ALL=C, and rescore_py
#   setup_recipe_dir             $s5 with Kaldi's utils/ and steps/, path.sh, data/dev split in $nj
#   make_carpa                   data/lang/G.carpa from data/local/lm.arpa (in $s5)
#   job_nbest N DIR ARCHIVE...   job N's entries of the dev N-best archives into DIR (in $s5)
# shellcheck shell=bash
# (repo and work come from the script that sources this; the variables set here are its)
# shellcheck disable=SC2154,SC2034

shared=$repo/../shared/data
dev=$shared/tts-wikitext2-dev
train_text=$shared/wikitext2-asr/train.txt
kutils=${KALDI_UTILS:-$kbin/../egs-utils}
nj=${NJ:-4}
weight=${WEIGHT:-0.8}
s5=$work/s5

log() { echo "[$(date -u +%H:%M:%S)] $*"; }

need_files() {
  local f
  for f in "$@"; do
    [ -e "$f" ] || { echo "$0: expected $f to exist"; exit 1; }
  done
}

need_progs() {
  local prog
  for prog in "$@"; do
    command -v "$prog" >/dev/null || { echo "$0: $prog not found on PATH"; exit 1; }
  done
}

kaldi_env() {
  export PATH=$kbin:$PATH LC_ALL=C
  rescore_py=$(head -1 "$(command -v rescore-nbest)" | sed 's/^#!//')  # the Python rescore is in
}

# The recipe dir: Kaldi's utils/ and steps/, a path.sh with Kaldi's and rescore's programs, the
# dev data dir and its split into $nj jobs (utils/split_data.sh). Leaves the shell in $s5.
setup_recipe_dir() {
  mkdir -p "$s5"
  cd "$s5" || exit 1
  ln -sfn "$kutils/utils" utils
  ln -sfn "$kutils/steps" steps
  echo "export PATH=$s5/utils:$kbin:$(dirname "$(command -v rescore-nbest)"):\$PATH" > path.sh
  if [ ! -f data/dev/text ]; then
    mkdir -p data/dev
    cp "$dev"/data/{text,utt2spk,spk2utt,segments} data/dev/
  fi
  [ -f "data/dev/split$nj/$nj/utt2spk" ] || utils/split_data.sh data/dev "$nj" >/dev/null
}

sym() { awk -v w="$1" '$1 == w { print $2 }' data/lang/words.txt; }

make_carpa() {
  utils/map_arpa_lm.pl data/lang/words.txt < data/local/lm.arpa > data/local/lm.int.arpa
  arpa-to-const-arpa --bos-symbol="$(sym '<s>')" --eos-symbol="$(sym '</s>')" \
    --unk-symbol="$(sym '<unk>')" data/local/lm.int.arpa data/lang/G.carpa.tmp 2> data/local/const_arpa.log
  mv data/lang/G.carpa.tmp data/lang/G.carpa
}

# Job N's utterances are those of data/dev/split$nj/N (as utils/split_data.sh split the data
# dir); DIR/ali gets an empty alignment per entry (no transition ids in this benchmark).
job_nbest() {
  local n=$1 t=$2 a
  shift 2
  mkdir -p "$t"
  for a in "$@"; do
    awk 'NR == FNR { keep[$1] = 1; next } { u = $1; sub(/-[0-9]+$/, "", u) } u in keep' \
      "data/dev/split$nj/$n/utt2spk" "$dev/nbest/$a" > "$t/$a"
  done
  awk '{ print $1, "" }' "$t/words" > "$t/ali"
}
