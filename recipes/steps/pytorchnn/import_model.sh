#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Sourced by lmrescore_nbest_pytorchnn.sh and lmrescore_lattice_pytorchnn.sh: the one cache of
# the imported model, so that both scripts share it.
#
#   import_kaldi_model <nn-model> <vocab> <output-decode-dir> <model-type> <embedding-dim> \
#                      <hidden-dim> <nlayers> <nhead> <oov-symbol>
#
# sets $cache to the directory whose model.pt is <nn-model> as a rescore checkpoint
# (rescore-import-kaldi-lm), importing it only when needed: <nn-model>.rescore/ beside the
# model, whose import.opts records the options it was made with (a newer model or vocabulary,
# or other options, make a new one), or <output-decode-dir>/nnlm where the model's directory is
# not writable.  The import's log goes to <output-decode-dir>/log/import.log.

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
