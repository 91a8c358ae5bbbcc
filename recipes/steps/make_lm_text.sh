#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# The LM text of rescore-train-lm from a Kaldi recipe: the transcripts of data dirs (their
# 'text', utterance ids stripped) and, optionally, more text in files of one sentence a line (an
# LM corpus, e.g. Fisher transcripts for SWBD).  Writes <out-dir>/train.txt (the transcripts,
# then each corpus) and <out-dir>/valid.txt (every --valid-every'th transcript line, left out
# of train.txt), and reports, for each source, the share of its running words that are not in
# the recognizer's words.txt: the NN LM scores the recognizer's words, so the text must spell
# them as words.txt does (case, hyphens, noise marks); the most frequent such words are listed.
# Never give it the data dirs you tune or report on (dev, test).

# Begin configuration section.
extra=             # more LM text, one sentence a line, no ids: a file, or several separated by
                   # colons (a.txt:b.txt.gz); .gz files are read through gunzip
valid_every=50     # every Nth transcript line goes to valid.txt (a whole number >= 2)
show_oov=10        # how many of the most frequent words outside words.txt to list per source
# End configuration section.

help_message="Make rescore-train-lm's train.txt and valid.txt from the transcripts of Kaldi data dirs
(their text files, utterance ids stripped) and optional extra LM text; report the share of words
outside the recognizer's words.txt for each source.

Usage: $0 [options] <words.txt> <out-dir> <data-dir> [<data-dir> ...]
 e.g.: $0 --extra data/local/lm/corpus.txt data/lang_test/words.txt data/rescore_lm data/train
Run it from the Kaldi recipe directory. Then:
  rescore-train-lm --train data/rescore_lm/train.txt --valid data/rescore_lm/valid.txt ..."
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -ge 3 ] || usage_exit
words=$1 dir=$2
shift 2
check_number valid_every 'int>=1'
[ "$valid_every" -ge 2 ] || fail "--valid-every must be a whole number >= 2, got '$valid_every'"
check_number show_oov 'int>=0'
check_words_txt "$words"
for d in "$@"; do
  check_files "$d/text"
done
extras=()
if [ -n "$extra" ]; then
  IFS=: read -r -a extras <<< "$extra"
  for f in "${extras[@]}"; do
    [ -s "$f" ] || fail "--extra: expected a file of LM text, got '$f' (missing or empty)"
  done
fi

# oov_report <name> <file>: running words of <file> and the share outside words.txt.
oov_report() {
  awk -v name="$1" -v show="$show_oov" 'NR == FNR { known[$1] = 1; next }
    { for (i = 1; i <= NF; i++) { n++; if (!($i in known)) { oov++; count[$i]++ } } }
    END {
      printf "%s: %d lines, %d words, %.2f %% outside words.txt (%d)\n", name, FNR, n, n ? 100 * oov / n : 0, oov
      for (k = 0; k < show; k++) {
        best = ""
        for (w in count) if (best == "" || count[w] > count[best] || count[w] == count[best] && w < best) best = w
        if (best == "") break
        line = line sprintf(" %s (%d)", best, count[best]); delete count[best]
      }
      if (line != "") print "  most frequent:" line
    }' "$words" "$2"
}

mkdir -p "$dir"
tmp=$dir/.make_lm_text.$$
trap 'rm -f "$tmp".*' EXIT
# The transcripts without their ids; every valid_every'th line held out for validation.
for d in "$@"; do sed 's/^[^[:space:]]*[[:space:]]*//' "$d/text"; done | awk 'NF > 0' |
  awk -v every="$valid_every" -v valid="$tmp.valid" -v train="$tmp.train" \
    '{ if (NR % every == 0) print > valid; else print > train }'
[ -s "$tmp.valid" ] || fail "no transcript line for valid.txt: $* have fewer than $valid_every lines"
oov_report "transcripts of $* (train part)" "$tmp.train"
oov_report "transcripts (valid.txt)" "$tmp.valid"
for f in "${extras[@]}"; do
  case "$f" in *.gz) gunzip -c "$f" ;; *) cat "$f" ;; esac | awk 'NF > 0' > "$tmp.extra"
  oov_report "$f" "$tmp.extra"
  cat "$tmp.extra" >> "$tmp.train"
done
mv "$tmp.train" "$dir/train.txt"
mv "$tmp.valid" "$dir/valid.txt"
oov_report "$dir/train.txt" "$dir/train.txt"
echo "$0: wrote $dir/train.txt ($(wc -l < "$dir/train.txt") lines) and $dir/valid.txt ($(wc -l < "$dir/valid.txt") lines)"
