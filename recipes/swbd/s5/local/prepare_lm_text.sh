#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Text for the neural LMs of the Switchboard recipe, in <out-dir>:
#   train.txt  Switchboard training transcripts in conversation and time order
#              (--swbd-copies times), then the Fisher transcripts (one call after the other,
#              turns in time order: Kaldi's data/local/lm/fisher/text1.gz is made that way by
#              local/swbd1_train_lms.sh, from the sorted LDC transcript files)
#   valid.txt  the held-out Switchboard conversations (train_dev), same order
#   test.txt   the evaluation transcripts (eval2000), for perplexities only: never train on it
# One utterance per line, no ids, lower case as in Kaldi's swbd/s5c data dirs.

# Begin configuration section.
fisher_text=     # Kaldi's data/local/lm/fisher/text1.gz; empty: Switchboard only
swbd_copies=3    # Switchboard repeated against Fisher, as Kaldi's pytorchnn recipe does
test_data=       # a data dir whose text becomes test.txt (e.g. data/eval2000)
# End configuration section.

help_message="The Switchboard (+ Fisher) LM text: train.txt, valid.txt, test.txt in <out-dir>.

Usage: $0 [options] <train-data-dir> <valid-data-dir> <out-dir>
 e.g.: $0 --fisher-text data/local/lm/fisher/text1.gz --test-data data/eval2000 \\
         data/train_nodev data/train_dev data/rescore"
# shellcheck source=../../../steps/libs/common.sh
. "$(dirname "$0")/../../../steps/libs/common.sh"
[ $# -eq 3 ] || usage_exit
train=$1
valid=$2
dir=$3

for f in "$train/text" "$train/segments" "$valid/text" "$valid/segments" \
         ${fisher_text:+"$fisher_text"} ${test_data:+"$test_data/text"}; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist" && exit 1
done
mkdir -p "$dir"

local/text_in_time_order.sh "$train" > "$dir/swbd.train.txt"
local/text_in_time_order.sh "$valid" > "$dir/valid.txt"
if [ -n "$test_data" ]; then
  if [ -f "$test_data/segments" ]; then
    local/text_in_time_order.sh "$test_data" > "$dir/test.txt"
  else
    LC_ALL=C sort -k1,1 "$test_data/text" | cut -d' ' -f2- > "$dir/test.txt"
  fi
fi

: > "$dir/train.txt.tmp"
for _ in $(seq "$swbd_copies"); do
  cat "$dir/swbd.train.txt" >> "$dir/train.txt.tmp"
done
if [ -n "$fisher_text" ]; then
  # Fisher spells some hesitations differently from Switchboard; map them to the SWBD forms
  # (the same map as Kaldi's swbd/s5c/local/pytorchnn/data_prep.sh).
  gunzip -c "$fisher_text" | awk '
    BEGIN { m["hmm"] = "hum"; m["mmm"] = "um"; m["mm"] = "um"; m["mhm"] = "um-hum" }
    { for (i = 1; i <= NF; i++) if ($i in m) $i = m[$i]; if (NF) print }' >> "$dir/train.txt.tmp"
fi
mv "$dir/train.txt.tmp" "$dir/train.txt"
rm "$dir/swbd.train.txt"

for f in train valid ${test_data:+test}; do
  echo "$0: $dir/$f.txt: $(wc -l < "$dir/$f.txt") sentences, $(wc -w < "$dir/$f.txt") words"
done
