#!/usr/bin/env bash
# Rebuilds the tts-wikitext2-dev N-best benchmark (docs/benchmarks.md) from WikiText-2.
#
#   text   WikiText-2's tokenized train/valid/test (--wikitext DIR) normalized as ASR output
#          looks (local/normalize.py): the LM text, as in wikitext2-asr/
#   select the valid sentences of 5-30 words of [a-z'] only, the first 11 of each article
#          (local/select_dev.py): 627 sentences of 60 articles
#   speech flite voices rms, awb, slt, kal16 cycling over articles, one recording per article;
#          pink noise (sox) per article at SNR clean, 30, 35, 25, clean, 30 dB, cycling
#          (rescore-tts-data)
#   ASR    PocketSphinx 5.1.1 with its en-us models decodes them into 100-best lists with
#          acoustic and 3-gram LM costs (rescore-make-nbest)
#   layout the benchmark's files (local/make_layout.py): data/ (text, utt2spk, spk2utt,
#          segments, utt2dur, utt2sentidx, utt2cond, reco2docid), nbest/ (words_text, words,
#          acwt, lmwt.withlm, lmwt.nolm), lang/words.txt, extra/ps_1best.txt, stats.json
#   result first-pass and oracle WER (rescore-nbest --weight 0 at the decoder's weights) in a
#          generated README.md; with --benchmark DIR, the two sets compared side by side
#
# Needs: apt-get install -y flite sox; pip install -c constraints.txt -e '.[mini,benchrecipe]';
# WikiText-2, tokenized (wikitext-2-v1: train.txt, valid.txt, test.txt or wiki.*.tokens;
# data/README says where it comes from; the recipe downloads nothing).
# The decoding is nearly all the cost: 3 to 4 CPU-seconds an utterance, about 35 CPU-minutes
# for the 627 (--nj splits it over processes).
# Usage: recipes/tts_wikitext2/run.sh --wikitext DIR [--dir DIR] [--stage N] [--articles N] ...
set -euo pipefail

# Begin configuration section.
stage=0
stop_stage=100
wikitext=""                    # WikiText-2 tokenized: DIR/{train,valid,test}.txt (required)
dir=exp/tts_wikitext2
nj=1                           # decoding processes
articles=0                     # the first N valid articles only (0: all 60)
per_article=11                 # sentences per article, at most
voices=rms,awb,slt,kal16       # flite voices, cycling over articles
snrs=clean,30,35,25,clean,30   # pink noise SNR (dB) per article, cycling
nbest=100
benchmark=""                   # an existing tts-wikitext2-dev to compare with (optional)
# End configuration section.

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo "Options (--name value; defaults):"
  sed -n '/^# Begin configuration/,/^# End configuration/p' "$0" | sed '1d;$d' | sed 's/^/  --/; s/=/ /'
  exit "${1:-1}"
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage 0 ;;
    --*) name=${1#--}; name=${name//-/_}
         if [ $# -lt 2 ] || ! declare -p "$name" >/dev/null 2>&1 || [[ "$name" == usage ]]; then
           echo "$0: bad option $1" >&2; usage
         fi
         printf -v "$name" '%s' "$2"; shift 2 ;;
    *) echo "$0: unexpected argument $1" >&2; usage ;;
  esac
done
[ -n "$wikitext" ] || { echo "$0: --wikitext DIR is required (WikiText-2's train/valid/test.txt)" >&2; usage; }
for n in nj articles per_article nbest stage stop_stage; do
  [[ "${!n}" =~ ^[0-9]+$ ]] || { echo "$0: --${n//_/-}: expected a whole number, got '${!n}'" >&2; exit 2; }
done

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$here/path.sh"
cd "$repo_root"
local_dir=recipes/tts_wikitext2/local

log() { echo "$(date +%H:%M:%S) [stage $1] $2" >&2; }
start_time=$(date +%s)
set_dir=$dir/tts-wikitext2-dev

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log 0 "checking tools and WikiText-2"
  for f in train valid test; do
    [ -f "$wikitext/$f.txt" ] || [ -f "$wikitext/wiki.$f.tokens" ] || {
      echo "error: $wikitext/$f.txt: expected WikiText-2's tokenized $f text ($f.txt or wiki.$f.tokens), got no such file (data/README)" >&2; exit 1; }
  done
  command -v flite >/dev/null || { echo "error: flite not found (Debian: apt-get install -y flite)" >&2; exit 1; }
  command -v sox >/dev/null || { echo "error: sox not found (Debian: apt-get install -y sox)" >&2; exit 1; }
  $python -c "import pocketsphinx" 2>/dev/null || { echo "error: Python package pocketsphinx missing (pip install -e '.[mini]')" >&2; exit 1; }
  $python -c "import num2words" 2>/dev/null || { echo "error: Python package num2words missing (pip install -e '.[benchrecipe]')" >&2; exit 1; }
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  log 1 "text: $wikitext -> $dir/text ({train,valid,test}.{txt,docids,titles})"
  $python $local_dir/normalize.py "$wikitext" "$dir/text"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  log 2 "selection: the first $per_article valid sentences of each article -> $dir/select"
  $python $local_dir/select_dev.py "$dir/text" "$dir/select" --articles "$articles" --per-article "$per_article"
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  log 3 "speech: flite ($voices) + pink noise ($snrs dB) -> $dir/tts"
  rm -rf "$dir/tts"
  $python -m rescore.cli.tts_data "$dir/select/text" "$dir/tts" --docids "$dir/select/docids" \
    --prefix dev-a --gap 0 --voices "$voices" --snrs "$snrs" --nj "$nj"
fi

if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  log 4 "ASR: PocketSphinx $nbest-best -> $dir/decode ($nj jobs)"
  rm -rf "$dir/decode"
  $python -m rescore.cli.make_nbest "$dir/tts" "$dir/decode" --nbest "$nbest" --nj "$nj"
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  log 5 "layout: the benchmark's files -> $set_dir"
  rm -rf "$set_dir"
  $python $local_dir/make_layout.py "$dir/text" "$dir/select" "$dir/tts" "$dir/decode" "$set_dir"
fi

if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
  log 6 "first pass and oracle: rescore-nbest --weight 0 at the decoder's weights"
  rm -rf "$dir/first_pass"
  $python -m rescore.cli.nbest "$set_dir/nbest" "$dir/first_pass" --data-dir "$set_dir/data" \
    --inv-acwt 9.5 --wip 0 --weight 0 > /dev/null
  $python $local_dir/report.py "$set_dir" "$dir/first_pass/report.json" ${benchmark:+--benchmark "$benchmark"}
fi
echo "tts-wikitext2 recipe done in $(( $(date +%s) - start_time )) s; the set is $set_dir" >&2
