#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# The vocabulary of a recipe's neural LMs: the old lang dir's words.txt (Kaldi's symbol table,
# so that the LMs score every word the decoder can output), with <unk> added when it has none.
# Shared by the SWBD and WSJ recipes (their stage 2); train_lms.sh gives it to rescore-train-lm.

# Begin configuration section.
unk="<unk>"   # the symbol of words outside the vocabulary
# End configuration section.

help_message="Copy the old lang dir's words.txt into <lm-data-dir>, adding <unk> when it is not there.

Usage: $0 [options] <lang-dir> <lm-data-dir>
 e.g.: $0 ../s5c/data/lang_sw1_fsh_fg data/rescore"
# shellcheck source=libs/common.sh
. "$(dirname "$0")/libs/common.sh"

[ $# -eq 2 ] || usage_exit
lang=$1
dir=$2
check_words_txt "$lang/words.txt"

mkdir -p "$dir"
awk -v unk="$unk" '{ print } $1 == unk { found = 1 } $2 >= next_id { next_id = $2 + 1 }
  END { if (!found) print unk, next_id }' "$lang/words.txt" > "$dir/words.txt.tmp"
mv "$dir/words.txt.tmp" "$dir/words.txt"
echo "$0: $dir/words.txt: $(wc -l < "$dir/words.txt") words"
