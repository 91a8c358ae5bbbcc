#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Prints the transcripts of a Kaldi data dir, one utterance per line without its id, in
# conversation order and, inside a conversation, in time order: what LM training with state
# carried across sentences (and the pointer's history) needs.  Kaldi's own text files are
# sorted by utterance id, which for Switchboard puts all of side A before side B.
# The order comes from segments (<utt> <reco> <start> <end>); with --merge-sides true the two
# sides of a Switchboard call (reco ids sw02001-A, sw02001-B) form one conversation, so the
# turns of both speakers interleave as they were spoken.

# Begin configuration section.
merge_sides=true   # true: the reco ids <call>-A and <call>-B are one conversation
# End configuration section.

set -eo pipefail
# shellcheck disable=SC1091
. utils/parse_options.sh
set -u

if [ $# != 1 ]; then
  echo "Usage: $0 [--merge-sides true|false] <data-dir>  > text"
  echo " e.g.: $0 data/train_nodev > data/rescore/swbd.train.txt"
  exit 1
fi
data=$1
for f in "$data/text" "$data/segments"; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist" >&2 && exit 1
done

# conversation, start time, words; a stable sort keeps ties in the order of the text file.
awk -v merge="$merge_sides" '
  NR == FNR { conv = $2; if (merge == "true") sub(/-[AB]$/, "", conv); key[$1] = conv " " $3; next }
  !($1 in key) { missing++; next }
  { utt = $1; $1 = ""; print key[utt] $0 }
  END { if (missing) { print "'"$0"': " missing " utterances of the text have no segment" > "/dev/stderr"; exit 1 } }
' "$data/segments" "$data/text" |
  LC_ALL=C sort -s -k1,1 -k2,2g |
  cut -d' ' -f3- |
  awk 'NF > 0'
