#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Sourced by lmrescore_nbest_pytorchnn.sh and lmrescore_lattice_pytorchnn.sh (after
# ../libs/common.sh): the checks of Kaldi's options and inputs they share, and the one cache of
# the imported model, so that both scripts share it.
#
#   import_checked <step> <old-lang-dir> <nn-model> <vocab> <data-dir> <input-decode-dir> <output-decode-dir>
#
# checks, before the import, that the step the script runs and rescore-import-kaldi-lm exist,
# the model options (--model-type, its sizes, --oov-symbol in the vocabulary), --inv-acwt,
# --weight, --stage, --device and the input files (the step checks its own again); then imports
# the model (import_kaldi_model below, which sets cache), --oov-symbol without the shell quotes
# of Kaldi's default ("'<unk>'": the symbol is inside).
#
#   import_kaldi_model <nn-model> <vocab> <output-decode-dir> <model-type> <embedding-dim> \
#                      <hidden-dim> <nlayers> <nhead> <oov-symbol>
#
# sets $cache to the directory whose model.pt is <nn-model> as a rescore checkpoint
# (rescore-import-kaldi-lm), importing it only when needed: <nn-model>.rescore/ beside the
# model, whose import.opts records the options it was made with (a newer model or vocabulary,
# or other options, make a new one), or <output-decode-dir>/nnlm where the model's directory is
# not writable.  The import's log goes to <output-decode-dir>/log/import.log.
# (The option variables come from the script that sources this.)
# shellcheck disable=SC2154

import_checked() {
  local var oov
  [ -x "$1" ] || fail "expected $1 (the step it runs) to exist"
  check_programs rescore-import-kaldi-lm
  check_choice model_type LSTM GRU Transformer
  for var in embedding_dim hidden_dim nlayers nhead; do check_number "$var" 'int>=1'; done
  check_number inv_acwt '>0'
  check_number weight 0..1
  check_number stage 'int>=0'
  check_device device
  check_old_lm "$2"
  check_words_txt "$2/words.txt"
  check_files "$3"
  [ -s "$3" ] || fail "expected $3 to be a model (what steps/pytorchnn/train.py saved), got an empty file"
  check_words_txt "$4"
  oov=${oov_symbol#\'}
  oov=${oov%\'}
  awk -v w="$oov" '$1 == w { found = 1 } END { exit !found }' "$4" ||
    fail "expected the OOV symbol '$oov' (--oov-symbol) in the vocabulary $4"
  check_files "$5/utt2spk"
  check_decode_dir "$6"
  import_kaldi_model "$3" "$4" "$7" "$model_type" "$embedding_dim" "$hidden_dim" "$nlayers" "$nhead" "$oov"
}

import_kaldi_model() {
  local nn_model=$1 vocab=$2 dir=$3 model_type=$4 embedding_dim=$5 hidden_dim=$6 nlayers=$7 \
    nhead=$8 oov=$9 opts
  cache=$nn_model.rescore
  opts="model-type=$model_type embedding-dim=$embedding_dim hidden-dim=$hidden_dim nlayers=$nlayers nhead=$nhead oov=$oov vocab=$(cd "$(dirname "$vocab")" && pwd)/$(basename "$vocab")"
  if [ -f "$cache/model.pt" ] && [ -f "$cache/import.opts" ] && [ "$(cat "$cache/import.opts")" = "$opts" ] &&
     [ "$cache/model.pt" -nt "$nn_model" ] && [ "$cache/model.pt" -nt "$vocab" ]; then
    echo "$0: using the imported model $cache/model.pt"
    return 0
  fi
  if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache=$dir/nnlm
    mkdir -p "$cache"
  fi
  echo "$0: importing $nn_model ($model_type) into $cache/model.pt"
  mkdir -p "$dir/log"
  rm -f "$cache/import.opts"
  # Imported as Kaldi's scorer loads it: tied (an untied model with a warning in the log).
  rescore-import-kaldi-lm "$nn_model" "$vocab" "$cache" --model-type "$model_type" \
    --embedding-dim "$embedding_dim" --hidden-dim "$hidden_dim" --nlayers "$nlayers" \
    --nhead "$nhead" --oov "$oov" 2> "$dir/log/import.log" ||
    { cat "$dir/log/import.log"; echo "$0: the import failed (log: $dir/log/import.log)"; return 1; }
  echo "$opts" > "$cache/import.opts"
}
