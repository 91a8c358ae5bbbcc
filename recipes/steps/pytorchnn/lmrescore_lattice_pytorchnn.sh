#!/usr/bin/env bash
# Copyright 2026  the rescore authors.  Apache 2.0.
#
# Kaldi's steps/pytorchnn/lmrescore_lattice_pytorchnn.sh, with its arguments and options, on
# rescore: a Kaldi recipe switches by changing the script's path.  The model Kaldi's
# steps/pytorchnn/train.py saved is imported once (rescore-import-kaldi-lm) and cached beside
# it, in <nn-model>.rescore/ as lmrescore_nbest_pytorchnn.sh caches it (import_model.sh);
# then ../lmrescore_lattice.sh does the work (the same path-cover method as Kaldi's script:
# prune, expand, path cover, NN LM scores, each arc's score from its best history).
#
# What differs from Kaldi's script (the reasons are in rescore/lattice.py):
#  - the paths of utterance k start from the LM state after the rescored best path of
#    utterance k-1 of the same conversation (--state-carry rescored, the default here; Kaldi
#    scores every path from an empty history: --state-carry none);
#  - arcs between the same two states, and paths with epsilon arcs (every lattice
#    nbest-to-lattice writes), get their own scores;
#  - Kaldi's lattice-add-nnlmscore is not needed.
# Kaldi's stages map to ours: 0 -> 1 (prune, expand), 1 -> 2 (path cover), 2 -> 3 (NN LM
# scores), 3 and 4 -> 4 (arc scores, old LM out).

# Begin configuration section.
model_type=Transformer # LSTM, GRU or Transformer
embedding_dim=768
hidden_dim=768
nlayers=6
nhead=8

inv_acwt=10
weight=0.8 # interpolation weight of a neural network LM with a N-gram LM
beam=5
epsilon=0.5
oov_symbol="'<unk>'"

cmd=run.pl
stage=0
skip_scoring=false
# rescore's own (not in Kaldi's script):
state_carry=rescored  # none (Kaldi's: every path from an empty history) | first-pass | rescored
rescore_opts=         # more options of lmrescore_lattice.sh, e.g. "--device cuda --oov-penalty 9.9"
# End configuration section.

echo "$0 $*" # Print the command line for logging

set -eo pipefail
# shellcheck disable=SC1091
[ -f ./path.sh ] && . ./path.sh
# shellcheck disable=SC1091
. utils/parse_options.sh
set -u

if [ $# != 6 ]; then
   echo "Perform lattice rescoring with a PyTorch-trained neural language model."
   echo "The neural LM is interpolated with an N-gram LM during rescoring."
   echo ""
   echo "Usage: $0 [options] <old-lang-dir> <nn-model-dir> vocab <data-dir> <input-decode-dir> <output-decode-dir>"
   echo "Main options:"
   echo "  --inv-acwt <inv-acwt>          # default $inv_acwt.  e.g. --inv-acwt 17.  Equivalent to LM scale to use."
   echo "  --cmd <run.pl|queue.pl [opts]> # how to run jobs."
   echo "  --model-type <LSTM|GRU|Transformer>, --embedding-dim, --hidden-dim, --nlayers, --nhead"
   echo "                                 # the model as Kaldi's train.py made it"
   echo "  --weight, --beam, --epsilon, --oov-symbol, --stage, --skip-scoring: as Kaldi's script"
   echo "  --state-carry <none|first-pass|rescored>  # default $state_carry (Kaldi's script: none)"
   echo "  --rescore-opts <options>       # options of lmrescore_lattice.sh"
   exit 1;
fi

oldlang=$1
nn_model=$2
vocab=$3
data=$4
indir=$5
dir=$6

here=$(dirname "$0")
step=$here/../lmrescore_lattice.sh
for f in "$nn_model" "$vocab" "$indir/lat.1.gz"; do
  [ ! -f "$f" ] && echo "$0: expected file $f to exist." && exit 1
done
[ ! -x "$step" ] && echo "$0: expected $step (the lattice step it calls) to exist" && exit 1
[ ! -f "$here/import_model.sh" ] && echo "$0: expected $here/import_model.sh beside this script" && exit 1
case "$model_type" in LSTM|GRU|Transformer) ;;
  *) echo "$0: --model-type must be LSTM, GRU or Transformer, got '$model_type'"; exit 1 ;;
esac
case "$stage" in
  ''|*[!0-9]*) echo "$0: --stage must be 0 to 4, got '$stage'"; exit 1 ;;
esac
command -v rescore-import-kaldi-lm >/dev/null 2>&1 ||
  { echo "$0: rescore-import-kaldi-lm not found on PATH (activate rescore's environment in path.sh)"; exit 1; }

# Kaldi's default oov_symbol carries shell quotes ("'<unk>'"): the symbol is what is inside.
oov=${oov_symbol#\'}
oov=${oov%\'}

# The imported model, cached beside the Kaldi one as the N-best script caches it (one cache,
# in <nn-model>.rescore/, for both: import_model.sh).
# shellcheck disable=SC1091
. "$here/import_model.sh"
cache=  # set by import_kaldi_model
import_kaldi_model "$nn_model" "$vocab" "$dir" "$model_type" "$embedding_dim" "$hidden_dim" \
  "$nlayers" "$nhead" "$oov" || exit 1

our_stage=$((stage + 1))
[ "$our_stage" -gt 4 ] && our_stage=4
# $rescore_opts holds options: it must split.
# shellcheck disable=SC2086
"$step" --cmd "$cmd" --stage "$our_stage" --inv-acwt "$inv_acwt" --weight "$weight" \
  --beam "$beam" --epsilon "$epsilon" --state-carry "$state_carry" \
  --skip-scoring "$skip_scoring" $rescore_opts \
  "$oldlang" "$cache/model.pt" "$data" "$indir" "$dir" || exit 1
exit 0
