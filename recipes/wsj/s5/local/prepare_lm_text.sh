#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Text for the neural LMs of the WSJ recipe, in <out-dir>:
#   train.txt  the WSJ LM training text (LDC's 1987-89 WSJ text of WSJ1, as Kaldi's
#              local/wsj_extend_dict.sh cleans it into data/local/dict_nosp_larger/cleaned.gz),
#              in its own (article) order, less the validation lines
#   valid.txt  every --valid-every'th line of it, held out (as Kaldi's pytorchnn recipe does)
#   test.txt   the evaluation transcripts (test_eval92), for perplexities only
# One sentence per line, no ids, upper case as in Kaldi's WSJ data dirs.

# Begin configuration section.
valid_every=500   # hold out one line in this many
test_data=        # a data dir whose text becomes test.txt (e.g. data/test_eval92)
# End configuration section.

help_message="The WSJ LM text: train.txt, valid.txt, test.txt in <out-dir>.

Usage: $0 [options] <lm-text-gz> <out-dir>
 e.g.: $0 --test-data data/test_eval92 data/local/dict_nosp_larger/cleaned.gz data/rescore"
# shellcheck source=../../../steps/libs/common.sh
. "$(dirname "$0")/../../../steps/libs/common.sh"
[ $# -eq 2 ] || usage_exit
text=$1
dir=$2

for f in "$text" ${test_data:+"$test_data/text"}; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist" && exit 1
done
mkdir -p "$dir"

: > "$dir/valid.txt.tmp"
gunzip -c "$text" | awk -v every="$valid_every" -v valid="$dir/valid.txt.tmp" '
  NF == 0 { next }
  ++n % every == 0 { print > valid; next }
  { print }' > "$dir/train.txt.tmp"
mv "$dir/valid.txt.tmp" "$dir/valid.txt"
mv "$dir/train.txt.tmp" "$dir/train.txt"
if [ -n "$test_data" ]; then
  LC_ALL=C sort -k1,1 "$test_data/text" | cut -d' ' -f2- > "$dir/test.txt"
fi

for f in train valid ${test_data:+test}; do
  echo "$0: $dir/$f.txt: $(wc -l < "$dir/$f.txt") sentences, $(wc -w < "$dir/$f.txt") words"
done
